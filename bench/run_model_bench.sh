#!/usr/bin/env bash
# pp512/tg128 for every benchmark model (issue 3). Prints one line per model:
# tokens/s and the weight bytes read per second by decode (compare with
# build/machine_limits). Usage: bench/run_model_bench.sh [pagoda-binary] [threads]
set -euo pipefail
bin=${1:-build/pagoda}
t=${2:-2}
out=${MODELS:-/tmp/pagoda-bench}
for m in tl-q4_0 tl-q8_0 tl-f16 tl-q4_k m110-q4_0 m110-q8_0 m110-f16 m110-q4_k; do
  "$bin" bench model -m "$out/$m.gguf" -p 512 -n 128 -r ${REPS:-3} -t "$t" --json |
    python3 -c "import json,sys; r=json.load(sys.stdin); print('$m', ' '.join(f\"{x['test']}={x['avg_ts']:.1f}±{x['stddev_ts']:.1f}\" for x in r), f\"size={r[0]['model_size']/2**20:.0f}MiB\", f\"decode_read={r[-1]['model_size']*r[-1]['avg_ts']/1e9:.1f}GB/s\")"
done
