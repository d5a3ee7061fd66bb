#!/usr/bin/env bash
# Builds request_parse_fuzz (clang, ASan+UBSan, libFuzzer) and fuzzes the
# server's request-body parsing (JSON -> completion / chat requests -> engine
# specs, chat messages through the fallback template) for $1 seconds (default
# 60), starting from the valid bodies in request_parse_seeds/. Crashing
# inputs land in $BUILD_DIR/request_parse_artifacts/.
set -euo pipefail
seconds="${1:-60}"
here="$(cd "$(dirname "$0")" && pwd)"
source "$(dirname "$0")/fuzz_build.sh"

fuzz_build request_parse_fuzz

corpus="$build/request_parse_corpus"
artifacts="$build/request_parse_artifacts"
mkdir -p "$corpus" "$artifacts"
"$build/request_parse_fuzz" "$corpus" "$here/request_parse_seeds" -dict="$here/request_parse.dict" \
  -max_total_time="$seconds" -max_len=4096 -timeout=10 -malloc_limit_mb=256 -artifact_prefix="$artifacts/" \
  -print_final_stats=1 -print_funcs=0
