#!/usr/bin/env bash
# Builds grammar_fuzz (clang, ASan+UBSan, libFuzzer) and fuzzes the
# structured-output grammar compiler and matcher (GBNF, regex, JSON Schema;
# cached masks against the reference) for $1 seconds (default 60), starting
# from grammar_seeds/. Crashing inputs land in $BUILD_DIR/grammar_artifacts/.
set -euo pipefail
seconds="${1:-60}"
here="$(cd "$(dirname "$0")" && pwd)"
source "$(dirname "$0")/fuzz_build.sh"

fuzz_build grammar_fuzz

corpus="$build/grammar_corpus"
artifacts="$build/grammar_artifacts"
mkdir -p "$corpus" "$artifacts"
"$build/grammar_fuzz" "$corpus" "$here/grammar_seeds" -max_total_time="$seconds" -max_len=2048 -timeout=10 \
  -malloc_limit_mb=512 -artifact_prefix="$artifacts/" -print_final_stats=1 -print_funcs=0
