#!/usr/bin/env bash
# Serving throughput and control-request latency under slow clients for one
# `pagoda` binary (compare two builds by running it twice).
#   bench/run_http_bench.sh BINARY MODEL OUT_DIR [control requests under attack]
# 1. `pagoda serve -m MODEL -t 2 --kv-cache-mem 2048`; `pagoda bench serve` at
#    concurrency 1 (4 prompts) and 8 (16 prompts), 288-word prompts, 80 tokens.
# 2. bench/slow_clients.py: 200 slowloris + 300 idle connections, N control
#    requests (GET /health, every fourth a 4-token completion).
# Writes OUT_DIR/serve_c1.json, serve_c8.json, slow_clients.json.
set -euo pipefail
bin="$1"; model="$2"; out="$3"; n="${4:-100}"
here="$(cd "$(dirname "$0")" && pwd)"
client="${CLIENT:-$here/../build/pagoda}"
port="${PORT:-18555}"
mkdir -p "$out"
"$bin" serve -m "$model" -t 2 --kv-cache-mem 2048 --port "$port" 2>"$out/server.log" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null || true' EXIT
for _ in $(seq 1 300); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.2; done
common=(--base-url "http://127.0.0.1:$port" --input-len 288 --range-ratio 0.77 --output-len 80 --ignore-eos)
"$client" bench serve "${common[@]}" --num-prompts 4 --concurrency 1 --json "$out/serve_c1.json"
"$client" bench serve "${common[@]}" --num-prompts 16 --concurrency 8 --json "$out/serve_c8.json"
python3 "$here/slow_clients.py" --port "$port" --slow 200 --idle 300 --drip-ms 1000 --n "$n" --timeout-s 20 \
  --json "$out/slow_clients.json"
