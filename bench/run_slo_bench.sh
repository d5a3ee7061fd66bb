#!/usr/bin/env bash
# Goodput of --policy fcfs vs slo under the same Poisson load, at several
# request rates: `pagoda serve` with server-side targets (--slo-ttft-ms /
# --slo-tpot-ms) and `pagoda bench serve` measuring TTFT, TPOT and goodput.
# Usage: bench/run_slo_bench.sh BINARY MODEL OUT_DIR "RATE..." TTFT_MS TPOT_MS
set -euo pipefail
bin=$1 model=$2 out=$3 rates=$4 ttft=$5 tpot=$6
mkdir -p "$out"
for rate in $rates; do
  for policy in fcfs slo; do
    port=$((18400 + RANDOM % 500))
    "$bin" serve -m "$model" --port $port -t 2 --policy $policy --slo-ttft-ms "$ttft" --slo-tpot-ms "$tpot" \
      --max-num-batched-tokens 512 --kv-cache-mem 1024 > "$out/serve-$policy-$rate.log" 2>&1 &
    pid=$!
    for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.2; done
    "$bin" bench serve --base-url "http://127.0.0.1:$port" --num-prompts 80 --request-rate "$rate" \
      --input-len 200 --range-ratio 0.95 --output-len 24 --ignore-eos --slo-ttft-ms "$ttft" --slo-tpot-ms "$tpot" \
      --seed 7 --no-progress --json "$out/$policy-$rate.json" > "$out/$policy-$rate.txt" 2>&1
    kill $pid; wait $pid 2>/dev/null || true
    python3 - "$out/$policy-$rate.json" "$policy" "$rate" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
m = j.get("metrics", j)
def g(k):
    for d in (m, j):
        if k in d: return d[k]
    return float("nan")
print(f"{sys.argv[2]:5} rate {sys.argv[3]:>5}: goodput {g('goodput'):.3f} req/s, throughput {g('request_throughput'):.3f} req/s, "
      f"ttft p50 {g('p50_ttft_ms'):.0f} p99 {g('p99_ttft_ms'):.0f} ms, tpot p50 {g('p50_tpot_ms'):.1f} p99 {g('p99_tpot_ms'):.1f} ms")
PY
  done
done
