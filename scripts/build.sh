#!/usr/bin/env bash
# Configures and builds Pagoda in build/ (Release, tuned for this machine).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
ninja -C build
