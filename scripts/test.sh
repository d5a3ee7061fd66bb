#!/usr/bin/env bash
# Sets up, builds and runs every test: unit/integration tests through ctest,
# then short fuzzing runs of the GGUF parser and the HTTP request parsing.
# PAGODA_WERROR=ON (CI) makes compiler warnings errors.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh -DPAGODA_WERROR="${PAGODA_WERROR:-OFF}"
# The official openai npm client for the server's client test (npm registry).
if command -v npm >/dev/null; then
  (cd tests/server/node && npm ci --no-audit --no-fund --loglevel=error) || echo "test.sh: npm ci failed; the node client test will be skipped"
  (cd tests/server/chat_page && npm ci --no-audit --no-fund --loglevel=error) || echo "test.sh: npm ci failed; the chat page test will be skipped"
fi
(cd build && ctest --output-on-failure -j2 --timeout 600)
tests/fuzz/run_gguf_fuzz.sh 30
tests/fuzz/run_request_parse_fuzz.sh 30
tests/fuzz/run_http_request_fuzz.sh 30
tests/fuzz/run_grammar_fuzz.sh 30
