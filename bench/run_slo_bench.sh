#!/usr/bin/env bash
# Goodput of --policy fcfs vs slo under the same Poisson load, at several
# request rates: `pagoda serve` with server-side targets (--slo-ttft-ms /
# --slo-tpot-ms) and `pagoda bench serve` measuring TTFT, TPOT and goodput.
# Usage: bench/run_slo_bench.sh BINARY MODEL OUT_DIR "RATE..." TTFT_MS TPOT_MS
# PAIRED=1: the two policies serve at the same time, one thread each, pinned
# to CPUs 0 and 1 (swapped at every other rate), each with its own client
# sending the same request stream — on a noisy shared machine both see the
# same moments. The rates then are what one thread can carry.
set -euo pipefail
bin=$1 model=$2 out=$3 rates=$4 ttft=$5 tpot=$6
mkdir -p "$out"
paired=${PAIRED:-0}
threads=2; [ "$paired" = 1 ] && threads=1
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT

start_server() {  # POLICY RATE PORT CPU(or -)
  local pin=(); [ "$4" != - ] && pin=(taskset -c "$4")
  "${pin[@]}" "$bin" serve -m "$model" --port "$3" -t $threads --policy "$1" --slo-ttft-ms "$ttft" \
    --slo-tpot-ms "$tpot" --max-num-batched-tokens 512 --kv-cache-mem 1024 > "$out/serve-$1-$2.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 600); do curl -sf "http://127.0.0.1:$3/health" >/dev/null && return; sleep 0.2; done
  echo "run_slo_bench: the $1 server did not come up; see $out/serve-$1-$2.log" >&2
  exit 1
}

run_client() {  # POLICY RATE PORT
  "$bin" bench serve --base-url "http://127.0.0.1:$3" --num-prompts 80 --request-rate "$2" \
    --input-len 200 --range-ratio 0.95 --output-len 24 --ignore-eos --slo-ttft-ms "$ttft" --slo-tpot-ms "$tpot" \
    --seed 7 --no-progress --json "$out/$1-$2.json" > "$out/$1-$2.txt" 2>&1
}

report() {  # POLICY RATE
  python3 - "$out/$1-$2.json" "$1" "$2" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))["metrics"]
print(f"{sys.argv[2]:5} rate {sys.argv[3]:>5}: goodput {m['goodput']:.3f} req/s ({m['good_requests']}/{m['num_requests']}), "
      f"throughput {m['request_throughput']:.3f} req/s, TTFT p50 {m['ttft_ms']['p50']:.0f} p99 {m['ttft_ms']['p99']:.0f} ms, "
      f"TPOT p50 {m['tpot_ms']['p50']:.1f} p99 {m['tpot_ms']['p99']:.1f} ms")
PY
}

i=0
for rate in $rates; do
  if [ "$paired" = 1 ]; then
    cpu_f=$((i % 2)); cpu_s=$((1 - cpu_f))
    port_f=$((18400 + RANDOM % 500)); port_s=$((port_f + 500))
    pids=()
    start_server fcfs "$rate" $port_f $cpu_f
    start_server slo "$rate" $port_s $cpu_s
    run_client fcfs "$rate" $port_f & c1=$!
    run_client slo "$rate" $port_s & c2=$!
    wait $c1 $c2
    kill "${pids[@]}"; wait "${pids[@]}" 2>/dev/null || true
    pids=()
    echo "(fcfs on CPU $cpu_f, slo on CPU $cpu_s)"
    report fcfs "$rate"; report slo "$rate"
  else
    for policy in fcfs slo; do
      port=$((18400 + RANDOM % 500))
      pids=()
      start_server $policy "$rate" $port -
      run_client $policy "$rate" $port
      kill "${pids[@]}"; wait "${pids[@]}" 2>/dev/null || true
      pids=()
      report $policy "$rate"
    done
  fi
  i=$((i + 1))
done
