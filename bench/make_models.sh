#!/usr/bin/env bash
# Writes the random-weight benchmark models (TinyLlama-1.1B and 110M shapes)
# into ${MODELS:-/tmp/pagoda-bench}. Usage: bench/make_models.sh [pagoda-binary]
set -euo pipefail
bin=${1:-build/pagoda}
out=${MODELS:-/tmp/pagoda-bench}
mkdir -p "$out"
for d in q4_0 q8_0 f16 q4_k; do
  [ -f "$out/tl-$d.gguf" ] || "$bin" make-model --preset tinyllama-1.1b --dtype $d -o "$out/tl-$d.gguf"
done
for d in q8_0 f16 q4_0 q4_k; do
  [ -f "$out/m110-$d.gguf" ] || "$bin" make-model --preset 110m --dtype $d -o "$out/m110-$d.gguf"
done
