#!/usr/bin/env bash
# Installs the Debian packages Pagoda needs to build and test. Idempotent:
# does nothing when everything is already installed.
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config googletest libgtest-dev libgmock-dev
      libbenchmark-dev nlohmann-json3-dev libcpp-httplib-dev libcli11-dev libxxhash-dev
      clang clang-format libclang-rt-14-dev python3 python3-numpy nodejs chromium
      libopenmpi-dev openmpi-bin)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
