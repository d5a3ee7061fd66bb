#!/usr/bin/env bash
# Fails when a C++ file differs from what clang-format (.clang-format) makes
# of it. The tree was formatted once; this keeps it so. Generated tables are
# left out. Fix with: git ls-files '*.cc' '*.h' | xargs clang-format -i
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "check_format: clang-format is not installed (scripts/setup.sh)"; exit 1; }
mapfile -t files < <(git ls-files '*.cc' '*.h' | grep -v '^src/tokenizer/unicode_tables.cc$')
bad=()
for f in "${files[@]}"; do
  clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if ((${#bad[@]})); then
  echo "check_format: ${#bad[@]} file(s) need clang-format -i:"
  printf '  %s\n' "${bad[@]}"
  exit 1
fi
echo "check_format: ${#files[@]} files formatted"
