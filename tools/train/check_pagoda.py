#!/usr/bin/python3
"""Checks a pagoda binary against a model's reference outputs (ref.json):
tokenizer ids (reference texts and models/heldout-sample.txt) and greedy
continuations of `pagoda generate --temp 0`.

Usage: /usr/bin/python3 tools/train/check_pagoda.py PAGODA_BIN models/pagoda-small
"""
import json
import subprocess
import sys


def run(cmd, stdin=None):
    r = subprocess.run(cmd, input=stdin, capture_output=True, text=True,
                       timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"{cmd[:3]} rc={r.returncode}: {r.stderr[-500:]}")
    return r.stdout


def ids_of(out):
    return [int(x) for x in out.split()]


def main():
    exe, base = sys.argv[1], sys.argv[2]
    gguf = base + ".gguf"
    with open(base + ".ref.json") as f:
        ref = json.load(f)
    ok = True
    for t in ref["tokenize"]:
        got = ids_of(run([exe, "tokenize", "-m", gguf, "-p", t["text"],
                          "--ids", "--no-bos"]))
        if got != t["ids"]:
            ok = False
            print(f"TOKENIZE MISMATCH {t['text']!r}\n  want {t['ids']}\n"
                  f"  got  {got}")
    with open(base.rsplit("/", 1)[0] + "/heldout-sample.txt") as f:
        held = f.read()
    got = ids_of(run([exe, "tokenize", "-m", gguf, "--stdin", "--ids"], held))
    want = ref["heldout_ids"]
    if got != want:
        ok = False
        i = next((k for k, (a, b) in enumerate(zip(got, want)) if a != b),
                 min(len(got), len(want)))
        print(f"HELDOUT TOKENIZE MISMATCH at {i}: want {want[i:i + 8]} got "
              f"{got[i:i + 8]} (len want {len(want)} got {len(got)})")
    else:
        print(f"heldout tokenization matches ({len(got)} tokens)")
    for g in ref["greedy"]:
        out = run([exe, "generate", "-m", gguf, "-p", g["prompt"], "-n",
                   str(ref["n_predict"]), "--temp", "0", "-t", "1",
                   "--ignore-eos"])
        want = g["prompt"] + g["greedy_text"]
        if out.rstrip("\n") != want.rstrip("\n") and not out.startswith(want):
            ok = False
            print(f"GREEDY MISMATCH {g['prompt']!r}\n  want {want!r}\n"
                  f"  got  {out!r}")
        else:
            print(f"greedy ok: {g['prompt']!r}")
    print("ALL OK" if ok else "MISMATCHES FOUND")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
