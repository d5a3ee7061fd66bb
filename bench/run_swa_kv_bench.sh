#!/usr/bin/env bash
# KV memory per context token of a sliding-window model (gemma3, gpt-oss)
# at a long context, with sliding-window freeing (the default) and with
# --swa-full (every position of every layer kept, as llama.cpp's --swa-full),
# from `pagoda generate`'s "KV cache: at most ... held" line, plus the
# prefill/decode speed of each run.
#
# usage: bench/run_swa_kv_bench.sh PAGODA MODEL [CONTEXT_TOKENS] [KV_TYPE]
#   MODEL e.g. from `pagoda make-model --preset gemma3-1b --dtype q8_0 -o gemma3-1b.gguf`
set -euo pipefail
bin=${1:?pagoda binary} model=${2:?model file} ctx=${3:-8192} kv_type=${4:-f16}
gen=128
# Words of 2 tokens each with the built-in vocabulary; the count is checked below.
words=$(((ctx - gen) / 2))
prompt=$(python3 -c "
import random; random.seed(1)
w = ['the','river','stone','light','over','quiet','market','seven','winter','garden','paper','north']
print(' '.join(random.choice(w) for _ in range($words)))")
n_prompt=$("$bin" tokenize -m "$model" --ids -p "$prompt" | wc -w)
echo "model: $model; prompt $n_prompt tokens + $gen generated; KV cache type $kv_type"
for mode in freed full; do
  flags=()
  [ "$mode" = full ] && flags=(--swa-full)
  out=$("$bin" generate -m "$model" -p "$prompt" -n "$gen" --ignore-eos --ctx-size $((n_prompt + gen + 16)) \
    --kv-cache-mem 4096 --kv-cache-dtype "$kv_type" "${flags[@]}" 2>&1 >/dev/null)
  echo "--- sliding-window blocks $mode"
  grep -E "^(prefill|decode):|^KV cache:" <<<"$out"
done
