#!/usr/bin/env bash
# Prefix caching (issue 5): 32 requests sharing a 512-token system prompt with
# 32-token distinct suffixes and 64 output tokens, cache on vs off.
set -euo pipefail
bin=${1:-build/pagoda}
out=${MODELS:-/tmp/pagoda-bench}
m=${MODEL:-$out/tl-q4_0.gguf}
summ() { python3 -c "import json,sys; r=json.load(sys.stdin); print('$1', ' '.join(f'{k}={r[k]:.4g}' for k in ['elapsed_s','requests_per_s','output_tokens_per_s','prefix_cache_hit_rate']))"; }
for flag in "" "--no-prefix-cache"; do
  "$bin" bench throughput -m "$m" --num-prompts 32 --shared-prefix-len 512 --input-len 32 --output-len 64 \
    --max-seqs 32 -t 2 --json $flag | summ "shared-prefix ${flag:-cache-on}"
done
