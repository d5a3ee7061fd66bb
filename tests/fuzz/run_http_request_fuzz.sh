#!/usr/bin/env bash
# Builds http_request_fuzz (clang, ASan+UBSan, libFuzzer) and fuzzes whole
# HTTP request bytes (the server's HTTP/1.1 parser, pipelining, chunked
# bodies, then the JSON routes' body checks) for $1 seconds (default 60),
# starting from http_request_seeds/. Crashing inputs land in
# $BUILD_DIR/http_request_artifacts/.
set -euo pipefail
seconds="${1:-60}"
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="${BUILD_DIR:-$root/build-fuzz}"

if [[ ! -f "$build/build.ninja" ]]; then
  launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DPAGODA_FUZZ=ON -DPAGODA_TESTS=OFF -DPAGODA_NATIVE=OFF "${launcher[@]}"
fi
ninja -C "$build" -j"${FUZZ_JOBS:-2}" http_request_fuzz

corpus="$build/http_request_corpus"
artifacts="$build/http_request_artifacts"
mkdir -p "$corpus" "$artifacts"
"$build/http_request_fuzz" "$corpus" "$here/http_request_seeds" -dict="$here/http_request.dict" \
  -max_total_time="$seconds" -max_len=8192 -timeout=10 -malloc_limit_mb=256 -artifact_prefix="$artifacts/" \
  -print_final_stats=1 -print_funcs=0
