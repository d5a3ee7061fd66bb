#!/bin/bash
# Decode speed at several context depths for every KV cache dtype, and the
# sequences that fit a fixed KV budget (issue 13's quantized-KV numbers).
#   bench/run_kv_dtype_bench.sh BINARY MODEL.gguf [DEPTHS] [THREADS]
# e.g. bench/run_kv_dtype_bench.sh build/pagoda /tmp/pagoda-bench/tl-q4_0.gguf "512 2048 4096" 2
set -euo pipefail
bin=$1
model=$2
depths=${3:-"512 2048 4096"}
threads=${4:-0}
echo "# decode tg32 at depth d, tokens/s (one run each, after a warm-up)"
for d in $depths; do
  for t in f32 f16 q8 q4; do
    "$bin" bench model -m "$model" -p 0 -n 32 -r 1 -d "$d" -t "$threads" --kv-cache-dtype "$t" --json 2>/dev/null |
      python3 -c "import json,sys; j=json.load(sys.stdin)[0]; print('$t', j['test'], round(j['avg_ts'], 2))"
  done
done
