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
m = json.load(open(sys.argv[1]))["metrics"]
print(f"{sys.argv[2]:5} rate {sys.argv[3]:>5}: goodput {m['goodput']:.3f} req/s ({m['good_requests']}/{m['num_requests']}), "
      f"throughput {m['request_throughput']:.3f} req/s, TTFT p50 {m['ttft_ms']['p50']:.0f} p99 {m['ttft_ms']['p99']:.0f} ms, "
      f"TPOT p50 {m['tpot_ms']['p50']:.1f} p99 {m['tpot_ms']['p99']:.1f} ms")
PY
  done
done
