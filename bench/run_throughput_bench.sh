#!/usr/bin/env bash
# Offline throughput at several concurrencies (issue 4) and the prefix-cache
# workloads (issue 5). Usage: bench/run_throughput_bench.sh [pagoda-binary]
set -euo pipefail
bin=${1:-build/pagoda}
out=${MODELS:-/tmp/pagoda-bench}
summ() { python3 -c "import json,sys; r=json.load(sys.stdin); print('$1', ' '.join(f'{k}={r[k]:.4g}' for k in ['elapsed_s','requests_per_s','output_tokens_per_s','kv_waste','prefix_cache_hit_rate','num_preemptions']))"; }
for m in m110-q8_0 tl-q4_0; do
  for c in 1 4 16 64; do
    n=$(( c < 4 ? 4 : c ))
    "$bin" bench throughput -m "$out/$m.gguf" --num-prompts $n --input-len 64 --output-len 32 --max-seqs $c -t 2 --json | summ "$m c=$c n=$n"
  done
done
