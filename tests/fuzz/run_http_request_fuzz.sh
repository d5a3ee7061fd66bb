#!/usr/bin/env bash
# Builds http_request_fuzz (clang, ASan+UBSan, libFuzzer) and fuzzes whole
# HTTP request bytes (the server's HTTP/1.1 parser, pipelining, chunked
# bodies, then the JSON routes' body checks) for $1 seconds (default 60),
# starting from http_request_seeds/. Crashing inputs land in
# $BUILD_DIR/http_request_artifacts/.
set -euo pipefail
seconds="${1:-60}"
here="$(cd "$(dirname "$0")" && pwd)"
source "$(dirname "$0")/fuzz_build.sh"

fuzz_build http_request_fuzz

corpus="$build/http_request_corpus"
artifacts="$build/http_request_artifacts"
mkdir -p "$corpus" "$artifacts"
"$build/http_request_fuzz" "$corpus" "$here/http_request_seeds" -dict="$here/http_request.dict" \
  -max_total_time="$seconds" -max_len=8192 -timeout=10 -malloc_limit_mb=256 -artifact_prefix="$artifacts/" \
  -print_final_stats=1 -print_funcs=0
