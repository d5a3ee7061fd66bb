#!/usr/bin/env bash
# Tiered KV: time to the first token of a long prompt recomputed vs loaded
# from the disk tier after a restart (`pagoda generate` twice on one
# --kv-disk-dir: the first run persists the prompt's blocks at exit, the
# second loads them). Also the same with the page cache dropped when the
# machine allows it (root), i.e. read from the device.
# Usage: bench/run_kv_tier_bench.sh BINARY MODEL [PROMPT_WORDS] [THREADS]
set -euo pipefail
bin=$1 model=$2 words=${3:-1500} threads=${4:-2}
dir=$(mktemp -d /tmp/pagoda-kv-tier-bench.XXXXXX)
trap 'rm -rf "$dir"' EXIT
prompt=$(python3 -c "
import random
r = random.Random(7)
w = 'the a of and to in is was for on it with as his he at by that from this be are or her had one we not'.split()
print(' '.join(r.choice(w) for _ in range($words)))")
common=("$bin" generate -m "$model" -p "$prompt" -n 1 --temp 0 -t "$threads" --kv-cache-mem 2048)
ttft() { grep -o 'first token after [0-9.]* s' | awk '{print $4}'; }
"${common[@]}" > /dev/null 2> "$dir/warm.log"  # page cache and pack warm-up
"${common[@]}" > /dev/null 2> "$dir/recompute.log"
"${common[@]}" --kv-disk-dir "$dir/tier" > /dev/null 2> "$dir/first.log"
"${common[@]}" --kv-disk-dir "$dir/tier" > /dev/null 2> "$dir/disk.log"
tokens=$(grep -o 'prefill: [0-9]* tokens' "$dir/recompute.log" | awk '{print $2}')
re=$(ttft < "$dir/recompute.log") disk=$(ttft < "$dir/disk.log")
echo "prompt: $tokens tokens; tier: $(du -sh "$dir/tier" | cut -f1) on disk"
echo "TTFT recomputed:            $re s"
echo "TTFT first run with a tier: $(ttft < "$dir/first.log") s (writes at exit)"
echo "TTFT from disk (restart):   $disk s   $(grep 'KV tiers' "$dir/disk.log")"
python3 -c "print(f'speed-up: {float(\"$re\") / float(\"$disk\"):.1f}x')"
if [ -w /proc/sys/vm/drop_caches ]; then
  sync && echo 3 > /proc/sys/vm/drop_caches
  "${common[@]}" --kv-disk-dir "$dir/tier" > /dev/null 2> "$dir/cold.log" || true
  echo "TTFT from disk, page cache dropped (model file cold too): $(ttft < "$dir/cold.log") s"
fi
