#!/usr/bin/env python3
"""Int8 prefill as a fraction of the VNNI peak, measured side by side in time
(issue 19's "TinyLlama Q8_0 and Q4_0 pp512 >= 70% of the VNNI peak").

On a shared VM the VNNI probe itself moves by a factor of 1.5-2 within an
hour (a busy neighbour on the same core), so a peak probed once at the start
of a run and a prefill rate measured minutes later do not describe the same
machine. Here every prefill measurement sits between two probes: each round
runs `machine_limits` (VNNI peak, 2 threads), then `pagoda bench model -p N
-n 0` on each file, then the probe again, and the file's ratio for the round
is its GOP/s over the mean of the two probes around it. Prints every round,
the median ratio per file, and the best prefill over the best probe of the
run (interference only ever slows either, so the two bests are the
undisturbed machine's).

usage: bench/int8_peak_ratio.py FILE... [--gop-per-token 2.2] [--rounds 6]
       [--prompt 512] [--threads 2] [--reps 2]
GOP per token: 2 x the parameters the matmuls read (TinyLlama-1.1B: 2.2).
"""
import argparse
import json
import os
import re
import statistics
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr[-2000:]}")
    return r.stdout


def vnni_peak(threads):
    out = run([os.path.join(ROOT, "build", "machine_limits"), str(threads), "16"])
    m = re.search(r"int8 VNNI peak:\s*([0-9.]+) GOP/s", out)
    if not m:
        raise SystemExit("machine_limits reports no VNNI peak on this host")
    return float(m.group(1))


def prefill_tok_s(model, prompt, threads, reps):
    out = run([os.path.join(ROOT, "build", "pagoda"), "bench", "model", "-m", model, "-p", str(prompt), "-n", "0",
               "-t", str(threads), "-r", str(reps), "--json"])
    return statistics.median(json.loads(out)[0]["samples_ts"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="+")
    ap.add_argument("--gop-per-token", type=float, default=2.2)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args()
    ratios = {m: [] for m in args.models}
    rates = {m: [] for m in args.models}
    before = vnni_peak(args.threads)
    probes = [before]
    for rnd in range(1, args.rounds + 1):
        for m in args.models:
            tok_s = prefill_tok_s(m, args.prompt, args.threads, args.reps)
            after = vnni_peak(args.threads)
            gops = tok_s * args.gop_per_token
            ratio = gops / ((before + after) / 2)
            ratios[m].append(ratio)
            rates[m].append(gops)
            probes.append(after)
            print(f"round {rnd} {os.path.basename(m)}: {tok_s:.1f} tok/s = {gops:.0f} GOP/s; "
                  f"probe {before:.0f} / {after:.0f} GOP/s; {100 * ratio:.1f}%", flush=True)
            before = after
    for m, r in ratios.items():
        print(f"{os.path.basename(m)} pp{args.prompt}: median {100 * statistics.median(r):.1f}% of the VNNI peak "
              f"[{', '.join(f'{100 * x:.1f}' for x in sorted(r))}]; best {max(rates[m]):.0f} GOP/s of the best probe "
              f"{max(probes):.0f} = {100 * max(rates[m]) / max(probes):.1f}%")


if __name__ == "__main__":
    main()
