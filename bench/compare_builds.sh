#!/usr/bin/env bash
# Two pagoda binaries back to back on every benchmark model of
# bench/make_models.sh: bench model -p 512 -n 128 -r 3 -t 2 (mean ± sd tok/s).
# Usage: OLD=/path/to/old/pagoda NEW=build/pagoda [MODELS=/tmp/pagoda-bench] bench/compare_builds.sh
set -euo pipefail
cd "$(dirname "$0")/.."
old=${OLD:?set OLD to the baseline binary}
new=${NEW:-build/pagoda}
models=${MODELS:-/tmp/pagoda-bench}
MODELS=$models bench/make_models.sh "$new" >/dev/null
for m in tl-q4_0 tl-q8_0 tl-f16 tl-q4_k m110-q4_0 m110-q8_0 m110-f16 m110-q4_k; do
  for which in old new; do
    bin=$old; [ $which = new ] && bin=$new
    "$bin" bench model -m "$models/$m.gguf" -p 512 -n 128 -r 3 -t 2 --json 2>/dev/null |
      python3 -c "import json,sys; r=json.load(sys.stdin); print('$m $which', ' '.join(f\"{x['test']}={x['avg_ts']:.1f}±{x['stddev_ts']:.1f}\" for x in r))"
  done
done
