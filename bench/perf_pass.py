#!/usr/bin/env python3
"""Side-by-side speed of Pagoda and its peers on the same files (issue 19).

For every model file and thread count: pp64, pp512 and tg128 from
`pagoda bench model` and from each peer's `llama-bench` (llama.cpp, and
ik_llama.cpp where it is built: with and without `-rtr 1 -fa 1`, the better
kept), one engine at a time, back to back per file. Then the start-up time
to the first generated token (the file already in the page cache): Pagoda
`generate -n 1` (with --pack-cache, after one start that wrote it, and
without) against llama.cpp's `llama-simple -n 1`. Prints markdown tables;
the machine's limits come from build/machine_limits in the same run.

usage: bench/perf_pass.py --peer-dir /work/peer FILE... [--threads 1,2] [--reps 3]
       [--tests pp64,pp512,tg128] [--stat mean|median] [--startup-only | --no-startup]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(cmd, env=None):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr[-2000:]}")
    return r.stdout


def parse_test(name):
    m = re.fullmatch(r"(pp|tg)(\d+)", name)
    if not m:
        raise SystemExit(f"bad test {name}")
    return m.group(1), int(m.group(2))


STAT = "mean"


def rate(result):
    """The repetitions' mean tokens/s (llama-bench's avg_ts), or with --stat
    median their median: on a shared VM a repetition of a sub-millisecond
    test that another process preempts for a scheduler tick (4 ms) moves the
    mean by tens of percent; the same statistic is used for every engine."""
    if STAT == "median":
        s = sorted(result["samples_ts"])
        return s[len(s) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2
    return result["avg_ts"]


def pagoda_bench(binary, model, threads, test, reps):
    kind, n = parse_test(test)
    p, g = (n, 0) if kind == "pp" else (0, n)
    out = run([binary, "bench", "model", "-m", model, "-p", str(p), "-n", str(g), "-t", str(threads),
               "-r", str(reps), "--json"])
    return rate(json.loads(out)[0])


def llama_bench(binary, model, threads, test, reps, extra=()):
    kind, n = parse_test(test)
    p, g = (n, 0) if kind == "pp" else (0, n)
    out = run([binary, "-m", model, "-p", str(p), "-n", str(g), "-t", str(threads), "-r", str(reps),
               "-o", "json", *extra])
    return rate(json.loads(out)[0])


def first_token_seconds(cmd, env=None):
    t = time.perf_counter()
    subprocess.run(cmd, capture_output=True, env=env, check=True)
    return time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="+")
    ap.add_argument("--peer-dir", default=os.path.join(os.path.dirname(ROOT), "peer"))
    ap.add_argument("--pagoda", default=os.path.join(ROOT, "build", "pagoda"))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--tests", default="pp64,pp512,tg128")
    ap.add_argument("--no-startup", action="store_true")
    ap.add_argument("--startup-only", action="store_true")
    ap.add_argument("--stat", choices=["mean", "median"], default="mean",
                    help="tokens/s over the repetitions: mean (llama-bench's avg_ts) or median, for every engine")
    a = ap.parse_args()
    global STAT
    STAT = a.stat

    lc = os.path.join(a.peer_dir, "llama.cpp", "build", "bin")
    ik = os.path.join(a.peer_dir, "ik_llama.cpp", "build", "bin")
    peers = [("llama.cpp", os.path.join(lc, "llama-bench"), [()])]
    if os.path.exists(os.path.join(ik, "llama-bench")):
        peers.append(("ik_llama.cpp", os.path.join(ik, "llama-bench"), [(), ("-rtr", "1", "-fa", "1")]))
    limits = run([os.path.join(ROOT, "build", "machine_limits")]).strip()
    print("machine_limits:\n```\n" + limits + "\n```\n")

    if not a.startup_only:
        names = ["Pagoda"] + [p[0] for p in peers]
        print("| file | threads | test | " + " | ".join(names) + " | Pagoda / best peer |")
        print("|---|---|---|" + "---|" * len(names) + "---|")
        for model in a.models:
            for t in [int(x) for x in a.threads.split(",")]:
                for test in a.tests.split(","):
                    row = [pagoda_bench(a.pagoda, model, t, test, a.reps)]
                    for _, binary, variants in peers:
                        best = 0.0
                        for extra in variants:
                            try:
                                best = max(best, llama_bench(binary, model, t, test, a.reps, extra))
                            except (RuntimeError, ValueError, IndexError, KeyError) as e:
                                print(f"<!-- {binary} {' '.join(extra)}: {e} -->", file=sys.stderr)
                        row.append(best)
                    best_peer = max(row[1:]) if len(row) > 1 else 0
                    ratio = f"{row[0] / best_peer:.2f}x" if best_peer > 0 else "-"
                    cells = " | ".join(f"{v:.1f}" if v > 0 else "fails" for v in row)
                    print(f"| {os.path.basename(model)} | {t} | {test} | {cells} | {ratio} |", flush=True)
        print()

    if not a.no_startup:
        simple = os.path.join(lc, "llama-simple")
        print("| file | Pagoda, --pack-cache (warm) | Pagoda, no cache | llama.cpp llama-simple | "
              "Pagoda cached / llama.cpp |")
        print("|---|---|---|---|---|")
        with tempfile.TemporaryDirectory() as cache:
            for model in a.models:
                gen = [a.pagoda, "generate", "-m", model, "-p", "hello", "-n", "1", "--temp", "0"]
                subprocess.run(gen + ["--pack-cache", cache], capture_output=True, check=True)  # writes the cache
                best = lambda cmd: min(first_token_seconds(cmd) for _ in range(3))
                cached = best(gen + ["--pack-cache", cache])
                plain = best(gen)
                peer = best([simple, "-m", model, "-n", "1", "hello"]) if os.path.exists(simple) else 0
                ratio = f"{cached / peer:.2f}" if peer > 0 else "-"
                print(f"| {os.path.basename(model)} | {cached:.2f} s | {plain:.2f} s | {peer:.2f} s | {ratio} |",
                      flush=True)


if __name__ == "__main__":
    main()
