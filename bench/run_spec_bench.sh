#!/usr/bin/env bash
# Speculative decoding on the bundled model (or MODEL=FILE).
#   bench/run_spec_bench.sh batch1 [TEMP]  generate -n 256, copy-heavy and free prompts,
#                                          none / ngram K=4 / ngram auto / draft K=4 / draft auto /
#                                          lookahead auto / medusa auto, median of 5 total tok/s
#   bench/run_spec_bench.sh sweep          bench throughput at --max-seqs 1, 4, 16, 64,
#                                          none vs ngram / draft / lookahead / medusa auto, 3 alternating rounds
#   bench/run_spec_bench.sh pairs [ROUNDS]  the same at --max-seqs 4, 16, 64, paired: none and the method run at
#                                          once, one thread each, pinned to CPUs 0 and 1 (swapped every round), so
#                                          both see the same machine; median of ROUNDS (default 6) ratios
#   bench/run_spec_bench.sh seq [ROUNDS] [C]  --max-seqs C (default 64): none and the four methods one after another
#                                          on CPU 0 (one thread), the order rotated every round; per method the
#                                          median of ROUNDS (default 10) ratios to the round's none and a bootstrap
#                                          95% interval (runs close in time, none at once: tighter than pairs here)
#                                          METHODS="none draft" runs only those (none is always needed)
#   bench/run_spec_bench.sh ab METHOD OTHER_BIN [ROUNDS] [free|copy]
#                                          batch 1 (generate -n 256, greedy, auto): per round none, METHOD with BIN
#                                          and METHOD with OTHER_BIN (another build), the two alternating first; per
#                                          build the median of ROUNDS (default 20) speedups over the round's none and
#                                          a bootstrap 95% interval (single runs swing 2x: auto's decisions follow
#                                          the step times it measures)
# THREADS (default 2), BIN (default build/pagoda), DRAFT (default models/pagoda-small-draft.gguf),
# LOOKAHEAD (W,N,G, default 1,5,2).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${BIN:-build/pagoda}
model=${MODEL:-models/pagoda-small.gguf}
t=${THREADS:-2}
draft=${DRAFT:-models/pagoda-small-draft.gguf}
la=${LOOKAHEAD:-1,5,2}
copy="Repeat after me: the little cat sat on the warm mat by the door. Repeat after me: the little cat"
free="Once upon a time"
case "${1:-batch1}" in
  batch1)
    temp=${2:-0}
    for w in copy free; do
      prompt=$copy; [ $w = free ] && prompt=$free
      for s in "none" "ngram 4" "ngram auto" "draft 4" "draft auto" "lookahead auto" "medusa auto"; do
        set -- $s
        args=(); [ "$1" != none ] && args=(--spec "$1" --num-spec-tokens "$2")
        [ "$1" = draft ] && args+=(--draft-model "$draft")
        [ "$1" = lookahead ] && args+=(--lookahead "$la")
        rates=$(for r in 1 2 3 4 5; do
          "$bin" generate -m "$model" -p "$prompt" -n 256 --temp "$temp" -s $r --ignore-eos -t "$t" "${args[@]}" 2>&1 >/dev/null |
            sed -n 's/^total:.*(\([0-9.]*\) tok\/s)/\1/p'
        done | sort -n | tr '\n' ' ')
        echo "t=$t temp=$temp $w $s: median $(echo $rates | cut -d' ' -f3) tok/s [$rates]"
      done
    done ;;
  sweep)
    for c in 1 4 16 64; do
      for round in 1 2 3; do
        for s in none ngram draft lookahead medusa; do
          "$bin" bench throughput -m "$model" --num-prompts 128 --input-len 64 --output-len 128 --max-seqs $c -t "$t" \
              --spec $s --draft-model "$draft" --lookahead "$la" --json 2>/dev/null |
            python3 -c "import json,sys; r=json.load(sys.stdin); print('C=$c round $round $s: output tok/s %.1f acceptance %.2f mean len %.2f' % (r['output_tokens_per_s'], r['spec_acceptance_rate'], r['spec_mean_accepted_len']))"
        done
      done
    done ;;
  pairs)
    rounds=${2:-6}
    tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
    one() {  # CPU METHOD OUT
      taskset -c "$1" "$bin" bench throughput -m "$model" --num-prompts 128 --input-len 64 --output-len 128 --max-seqs $c \
          -t 1 --spec "$2" --draft-model "$draft" --lookahead "$la" --json 2>/dev/null > "$3"
    }
    for c in 4 16 64; do
      for s in ngram draft lookahead medusa; do
        ratios=""
        for round in $(seq "$rounds"); do
          a=$((round % 2)); b=$((1 - a))
          one $a none "$tmp/none.json" & one $b $s "$tmp/spec.json" & wait
          ratios+=" $(python3 -c "import json; n=json.load(open('$tmp/none.json')); s=json.load(open('$tmp/spec.json'));
print('%.3f' % (s['output_tokens_per_s'] / n['output_tokens_per_s']))")"
        done
        echo "C=$c $s/none: median $(python3 -c "import statistics,sys; print('%.3f' % statistics.median(map(float, sys.argv[1:])))" $ratios) [$ratios ]"
      done
    done ;;
  seq)
    rounds=${2:-10}
    c=${3:-64}
    tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
    read -r -a methods <<< "${METHODS:-none ngram draft lookahead medusa}"
    for round in $(seq "$rounds"); do
      for k in "${!methods[@]}"; do
        s=${methods[$(((k + round) % ${#methods[@]}))]}
        taskset -c 0 "$bin" bench throughput -m "$model" --num-prompts 128 --input-len 64 --output-len 128 \
            --max-seqs "$c" -t 1 --spec "$s" --draft-model "$draft" --lookahead "$la" --json 2>/dev/null > "$tmp/r.json"
        echo "$round $s $(python3 -c "import json; print(json.load(open('$tmp/r.json'))['output_tokens_per_s'])")"
      done
    done > "$tmp/runs.txt"
    python3 - "$tmp/runs.txt" "$c" <<'PY'
import random, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    r, m, v = line.split()
    runs.setdefault(r, {})[m] = float(v)
rng = random.Random(1)
for m in ["ngram", "draft", "lookahead", "medusa"]:
    x = [d[m] / d["none"] for d in runs.values() if m in d and "none" in d]
    if not x:
        continue
    boot = sorted(statistics.median(rng.choices(x, k=len(x))) for _ in range(4000))
    print("C=%s %s/none: median %.3f, 95%% interval [%.3f, %.3f] over %d rounds, range %.3f-%.3f" %
          (sys.argv[2], m, statistics.median(x), boot[100], boot[3899], len(x), min(x), max(x)))
PY
    ;;
  ab)
    method=${2:?METHOD}; other=${3:?OTHER_BIN}; rounds=${4:-20}
    prompt=$free; [ "${5:-free}" = copy ] && prompt=$copy
    tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
    rate() {  # BIN [ARGS...]
      local b=$1; shift
      "$b" generate -m "$model" -p "$prompt" -n 256 --temp 0 --ignore-eos -t "$t" "$@" 2>&1 >/dev/null |
        sed -n 's/^total:.*(\([0-9.]*\) tok\/s)/\1/p'
    }
    args=(--spec "$method"); [ "$method" = draft ] && args+=(--draft-model "$draft")
    [ "$method" = lookahead ] && args+=(--lookahead "$la")
    for round in $(seq "$rounds"); do
      n=$(rate "$bin")
      if [ $((round % 2)) = 1 ]; then a=$(rate "$bin" "${args[@]}"); o=$(rate "$other" "${args[@]}")
      else o=$(rate "$other" "${args[@]}"); a=$(rate "$bin" "${args[@]}"); fi
      echo "$n $a $o"
    done > "$tmp/runs.txt"
    python3 - "$tmp/runs.txt" "$method" "$bin" "$other" <<'PY'
import random, statistics, sys
rows = [list(map(float, line.split())) for line in open(sys.argv[1]) if len(line.split()) == 3]
rng = random.Random(1)
for i, name in ((1, sys.argv[3]), (2, sys.argv[4])):
    x = [r[i] / r[0] for r in rows]
    boot = sorted(statistics.median(rng.choices(x, k=len(x))) for _ in range(4000))
    print("%s %s: speedup median %.2fx, 95%% interval [%.2f, %.2f] over %d rounds, range %.2f-%.2f" %
          (name, sys.argv[2], statistics.median(x), boot[100], boot[3899], len(x), min(x), max(x)))
PY
    ;;
  *) echo "usage: $0 batch1 [TEMP] | sweep | pairs [ROUNDS] | seq [ROUNDS] [C] | ab METHOD OTHER_BIN [ROUNDS] [free|copy]" >&2
     exit 2 ;;
esac
