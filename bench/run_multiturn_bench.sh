#!/usr/bin/env bash
# Multi-turn chat reuse (issue 17 item 4): the share of prompt tokens the
# prefix cache serves when each turn sends the whole conversation back.
#   bench/run_multiturn_bench.sh BINARY MODEL [INPUT_WORDS OUTPUT_TOKENS]
# `pagoda serve -m MODEL -t 2 --kv-cache-mem 2048` (KV_MEM; `default`: the flag left out), then `pagoda bench serve --dataset multi-turn`
# (8 conversations x 6 turns, concurrency 8, greedy, ignore_eos) with the
# client of this tree; prints the server's prefix-cache hit rate (/metrics),
# the upper bound (every token of earlier turns served, i.e. prompt tokens
# minus each turn's new user message and template tokens), and the outputs'
# digest (the same with SERVE_ARGS=--no-prefix-cache: reuse does not change
# the answers).
set -euo pipefail
bin="$1"; model="$2"; in_words="${3:-64}"; out_tokens="${4:-32}"
here="$(cd "$(dirname "$0")" && pwd)"
client="${CLIENT:-$here/../build/pagoda}"
port="${PORT:-18556}"
tmp="$(mktemp -d)"
kv=(--kv-cache-mem "${KV_MEM:-2048}")
[ "${KV_MEM:-}" = default ] && kv=()
"$bin" serve -m "$model" -t 2 "${kv[@]}" ${SERVE_ARGS:-} --port "$port" 2>"$tmp/server.log" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null || true; rm -rf "$tmp"' EXIT
for _ in $(seq 1 300); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.2; done
"$client" bench serve --base-url "http://127.0.0.1:$port" --dataset multi-turn --num-prompts 8 --turns 6 \
  --input-len "$in_words" --output-len "$out_tokens" --ignore-eos --concurrency 8 --no-progress \
  --json "$tmp/out.json" >"$tmp/bench.txt"
hit=$(curl -sf "http://127.0.0.1:$port/metrics" | awk '/^pagoda:prefix_cache_hit_rate/ {print $2}')
python3 - "$tmp/out.json" "$hit" <<'EOF'
import hashlib, json, sys
r = json.load(open(sys.argv[1]))
recs = sorted(r["requests"], key=lambda x: (x["conversation"], x["turn"]))
prompt = sum(x["prompt_tokens"] for x in recs)
# Best case: each turn reuses everything the previous turn of its
# conversation computed (its prompt and all but its last output token).
reusable = sum(p["prompt_tokens"] + p["output_tokens"] - 1
               for p, x in zip(recs, recs[1:]) if p["conversation"] == x["conversation"])
digest = hashlib.sha256(json.dumps([x["text"] for x in recs]).encode()).hexdigest()[:12]
print(f"hit_rate={float(sys.argv[2]):.3f} ceiling={reusable / prompt:.3f} requests={len(recs)} "
      f"failed={sum(not x['ok'] for x in recs)} prompt_tokens={prompt} output_digest={digest} "
      f"duration_s={r['metrics']['duration_s']:.1f}")
EOF
