#!/usr/bin/env bash
# Quantization quality: perplexity and KL divergence from the F32 model on
# held-out text, for each type x method (rtn, imatrix, gptq, awq), plus the
# MHA->GQA conversion of the same model. Calibration text and held-out text
# must not overlap (tools/train's corpus split: `corpus.py` writes train.jsonl
# and val.jsonl; this script makes calib.txt from train and eval.txt from val).
# TYPE "w8a8" is SmoothQuant's W8A8 (q8_0 --method smoothquant), one row.
# Usage: bench/run_quant_bench.sh BINARY MODEL CORPUS_DIR OUT_DIR ["TYPE..."] [CHUNKS]
set -euo pipefail
bin=$1 model=$2 corpus=$3 out=$4
types=${5:-"q8_0 q6_k q5_k_m q4_k_m q4_0"}
chunks=${6:-80}
mkdir -p "$out"
python3 - "$corpus" "$out" <<'PY'
import json, random, sys
corpus, out = sys.argv[1], sys.argv[2]
val = [json.loads(l)["text"] for l in open(f"{corpus}/val.jsonl")]
open(f"{out}/eval.txt", "w").write("\n\n".join(val))
train = [json.loads(l)["text"] for l in open(f"{corpus}/train.jsonl")]
random.seed(0)
random.shuffle(train)
take, n = [], 0
for t in train:
    take.append(t)
    n += len(t)
    if n > 300000:
        break
open(f"{out}/calib.txt", "w").write("\n\n".join(take))
PY
ppl() {  # model -> "ppl kl top1"
  "$bin" perplexity -m "$1" -f "$out/eval.txt" --chunks "$chunks" --kl-divergence "$out/base.logp" --json 2>/dev/null |
    python3 -c 'import json,sys; j=json.load(sys.stdin); print("%.4f %.6f %.2f" % (j["perplexity"], j["kl_divergence"], 100*j["top1_agreement"]))'
}
"$bin" perplexity -m "$model" -f "$out/eval.txt" --chunks "$chunks" --save-logits "$out/base.logp" --json \
  > "$out/base.json" 2>/dev/null
base=$(python3 -c 'import json,sys; print("%.4f" % json.load(open(sys.argv[1]))["perplexity"])' "$out/base.json")
"$bin" imatrix -m "$model" -f "$out/calib.txt" -o "$out/imatrix.gguf" > /dev/null
echo "| type | method | size MiB | quantize s | perplexity | KL | top-1 % | share of RTN's ppl increase left |"
echo "|---|---|---|---|---|---|---|---|"
echo "| f32 | — | $(du -m "$model" | cut -f1) | — | $base | 0 | 100 | — |"
for t in $types; do
  if [ "$t" = w8a8 ]; then
    start=$(date +%s.%N)
    "$bin" quantize "$model" "$out/w8a8.gguf" q8_0 -q --method smoothquant --calib "$out/calib.txt" > /dev/null
    secs=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$start" "$(date +%s.%N)")
    read -r p kl top <<< "$(ppl "$out/w8a8.gguf")"
    size=$(python3 -c "import os,sys; print(f'{os.path.getsize(sys.argv[1])/1048576:.2f}')" "$out/w8a8.gguf")
    echo "| w8a8 | smoothquant | $size | $secs | $p | $kl | $top | — |"
    rm -f "$out/w8a8.gguf"
    continue
  fi
  rtn_ppl=
  for m in rtn imatrix gptq awq; do
    case $m in
      rtn) args=() ;;
      imatrix) args=(--imatrix "$out/imatrix.gguf") ;;
      gptq|awq) args=(--method "$m" --calib "$out/calib.txt") ;;
    esac
    start=$(date +%s.%N)
    "$bin" quantize "$model" "$out/$t-$m.gguf" "$t" -q "${args[@]}" > /dev/null
    secs=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$start" "$(date +%s.%N)")
    read -r p kl top <<< "$(ppl "$out/$t-$m.gguf")"
    [ -z "$rtn_ppl" ] && rtn_ppl=$p
    left=$(python3 -c "import sys; b,r,p=map(float,sys.argv[1:]); print('—' if r-b<=0 else f'{100*(p-b)/(r-b):.0f}%')" \
      "$base" "$rtn_ppl" "$p")
    size=$(python3 -c "import os,sys; print(f'{os.path.getsize(sys.argv[1])/1048576:.2f}')" "$out/$t-$m.gguf")
    echo "| $t | $m | $size | $secs | $p | $kl | $top | $left |"
    rm -f "$out/$t-$m.gguf"
  done
done
echo
echo "| KV heads | perplexity | KL | top-1 % |"
echo "|---|---|---|---|"
for k in ${KV_HEADS:-4 2 1}; do
  "$bin" convert --kv-heads "$k" "$model" "$out/kv$k.gguf" > /dev/null
  read -r p kl top <<< "$(ppl "$out/kv$k.gguf")"
  echo "| $k | $p | $kl | $top |"
  rm -f "$out/kv$k.gguf"
done
