#!/usr/bin/env python3
"""Two (or more) kernels_bench binaries alternated on one filter: a
before/after comparison on a shared VM, where a machine's speed moves within
minutes. Each round runs every binary with 3 repetitions; prints, per
benchmark, the minimum real time of each binary (interference only ever
slows a run), its ratio to the first binary's minimum, and the median.

usage: bench/ab_kernels.py FILTER ROUNDS BIN_BEFORE BIN_AFTER [BIN...]
e.g.   bench/ab_kernels.py 'attention/prefill64/f32/ctx512$' 4 /tmp/kb_base build/kernels_bench
(PAGODA_ISA in the environment picks the ISA, as for kernels_bench.)
"""
import collections
import json
import statistics
import subprocess
import sys


def main():
    if len(sys.argv) < 5:
        raise SystemExit(__doc__)
    flt, rounds, bins = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    times = collections.defaultdict(list)
    for _ in range(rounds):
        for b in bins:
            out = subprocess.run([b, f"--benchmark_filter={flt}", "--benchmark_repetitions=3",
                                  "--benchmark_format=json"], capture_output=True, text=True, check=True).stdout
            for x in json.loads(out)["benchmarks"]:
                if x.get("run_type") == "iteration":
                    times[(x["run_name"], b)].append(x["real_time"])
    for name in sorted({k[0] for k in times}):
        base = min(times[(name, bins[0])])
        cells = []
        for b in bins:
            t = times[(name, b)]
            cells.append(f"{min(t):9.1f} ({min(t) / base:.3f}) med {statistics.median(t):9.1f}")
        print(name.ljust(36), "  ".join(cells))


if __name__ == "__main__":
    main()
