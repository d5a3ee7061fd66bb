#!/usr/bin/env bash
# Colocated vs prefill/decode disaggregated serving on one machine, same
# load: long prompts arriving while other requests decode. Colocated: one
# `pagoda serve` on every core. PD: a --role prefill and a --role decode
# instance (half the cores each) behind `pagoda router`. `pagoda bench
# serve` measures TTFT and TPOT (p50/p99) through each endpoint.
# Usage: bench/run_pd_bench.sh BINARY MODEL OUT_DIR [RATE] [INPUT_LEN] [OUTPUT_LEN] [NUM_PROMPTS]
set -euo pipefail
bin=$1 model=$2 out=$3 rate=${4:-0.2} input=${5:-400} output=${6:-48} num=${7:-16}
cores=$(nproc)
half=$((cores / 2 > 0 ? cores / 2 : 1))
mkdir -p "$out"
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT
wait_up() { for _ in $(seq 300); do curl -sf "http://127.0.0.1:$1/health" >/dev/null && return 0; sleep 0.2; done; return 1; }
bench() {  # port name
  "$bin" bench serve --base-url "http://127.0.0.1:$1" --num-prompts "$num" --request-rate "$rate" \
    --input-len "$input" --range-ratio 0.9 --output-len "$output" --ignore-eos --seed 7 --no-progress \
    --json "$out/$2.json" > "$out/$2.txt" 2>&1
  python3 - "$out/$2.json" "$2" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))["metrics"]
print(f"{sys.argv[2]:10}: {m['completed']} done, TTFT p50 {m['ttft_ms']['p50']:.0f} p99 {m['ttft_ms']['p99']:.0f} ms, "
      f"TPOT p50 {m['tpot_ms']['p50']:.1f} p99 {m['tpot_ms']['p99']:.1f} ms, {m['request_throughput']:.3f} req/s")
PY
}
base=$((18500 + RANDOM % 400))
"$bin" serve -m "$model" --port $base -t "$cores" --kv-cache-mem 2048 > "$out/colocated.log" 2>&1 &
pids=($!)
wait_up $base
bench $base colocated
cleanup
pids=()
"$bin" serve -m "$model" --port $((base + 1)) -t "$half" --role prefill --kv-cache-mem 1024 > "$out/prefill.log" 2>&1 &
pids+=($!)
"$bin" serve -m "$model" --port $((base + 2)) -t "$half" --role decode --kv-cache-mem 1024 > "$out/decode.log" 2>&1 &
pids+=($!)
"$bin" router --port $((base + 3)) --prefill "http://127.0.0.1:$((base + 1))" \
  --decode "http://127.0.0.1:$((base + 2))" > "$out/router.log" 2>&1 &
pids+=($!)
wait_up $((base + 1)) && wait_up $((base + 2)) && wait_up $((base + 3))
bench $((base + 3)) pd
curl -s "http://127.0.0.1:$((base + 2))/metrics" | grep -E '^pagoda:kv_host_hits|^pagoda:prefix_cache_hit_rate' || true
