#!/usr/bin/env python3
"""Two pagoda binaries on one `bench model` cell, alternating which runs
first every round: the median of each binary's per-process median tok/s and
the median of the per-round new/old ratios with a bootstrap 95% interval.
On a shared VM a process's speed swings with the other vCPU's load; pairing
the two binaries in every round and reading ratios keeps that out.

usage: bench/ab_model.py OLD NEW MODEL -p PP -n TG -t THREADS [--rounds 20] [--reps 100]
"""
import argparse
import json
import random
import statistics
import subprocess


def tok_s(binary, a):
    out = subprocess.run([binary, "bench", "model", "-m", a.model, "-p", str(a.p), "-n", str(a.n), "-r",
                          str(a.reps), "-t", str(a.t), "--json"], capture_output=True, text=True, check=True).stdout
    return statistics.median(json.loads(out)[0]["samples_ts"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("model")
    ap.add_argument("-p", type=int, default=0)
    ap.add_argument("-n", type=int, default=0)
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--reps", type=int, default=100)
    a = ap.parse_args()
    olds, news, ratios = [], [], []
    for i in range(a.rounds):
        if i % 2 == 0:
            o = tok_s(a.old, a)
            n = tok_s(a.new, a)
        else:
            n = tok_s(a.new, a)
            o = tok_s(a.old, a)
        olds.append(o)
        news.append(n)
        ratios.append(n / o)
    rng = random.Random(1)
    boot = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(2000))
    test = f"pp{a.p}" if a.p > 0 else f"tg{a.n}"
    print(f"{a.model.split('/')[-1]} {test} t={a.t}: old {statistics.median(olds):.0f} new "
          f"{statistics.median(news):.0f} tok/s, new/old {statistics.median(ratios):.3f} "
          f"[{boot[50]:.3f}, {boot[1949]:.3f}] ({a.rounds} rounds)")


if __name__ == "__main__":
    main()
