#!/usr/bin/python3
"""Writes a long text the bundled model never trained on, for long-context
quality runs (KV quantization, StreamingLLM): models/heldout-sample.txt
(held-out Bible chapters) followed by the Python 3.11 standard-library files
that tools/train/corpus.py leaves out of the corpus (it trains on every other
top-level /usr/lib/python3.11/*.py; the odd-numbered ones were never seen),
cleaned the same way, until the text reaches --chars characters.

Usage: bench/make_long_heldout.py --out /tmp/long-heldout.txt [--chars 60000]
"""
import argparse
import glob
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tools", "train"))
import corpus  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--chars", type=int, default=60000)
    args = ap.parse_args()
    root = os.path.join(os.path.dirname(__file__), "..")
    with open(os.path.join(root, "models", "heldout-sample.txt"), encoding="utf-8") as f:
        text = f.read()
    files = sorted(glob.glob("/usr/lib/python3.11/*.py"))
    if not files:
        sys.exit("make_long_heldout: /usr/lib/python3.11 is missing (apt-get install python3.11)")
    for i, path in enumerate(files):
        if len(text) >= args.chars:
            break
        if i % 2 == 0:
            continue  # in the training corpus
        with open(path, "rb") as f:
            text += "\n" + corpus.clean(corpus.decode(f.read()).expandtabs(4))
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(text[: args.chars])
    print(f"{args.out}: {min(len(text), args.chars)} characters")


if __name__ == "__main__":
    main()
