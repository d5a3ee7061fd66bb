#!/usr/bin/python3
"""Builds the training corpus from free texts shipped in Debian packages.

Sources (all read from the installed packages, nothing downloaded):
  kjv      bible-kjv / bible-kjv-text: the `bible` program prints the text
  fortune  fortunes, fortunes-min: /usr/share/games/fortunes/* (%-separated)
  devil    dict-devil: The Devil's Dictionary (dictd .dz = gzip)
  jargon   dict-jargon: the Jargon File
  gcide    dict-gcide: Webster 1913 (every 12th entry; markup stripped)
  python   python3.11 stdlib: every other top-level /usr/lib/python3.11/*.py

Each source is split into documents (a Bible chapter, a fortune, a dictionary
entry, a source file).  A document goes to the held-out split when the first
byte of md5("<source>:<doc id>") is < 5 (about 2%), so the split never changes
when other sources are added.  Output: <out>/train.jsonl and <out>/val.jsonl,
one {"src", "id", "text"} object per line, in a fixed order.

Usage: /usr/bin/python3 tools/train/corpus.py --out /work/train-work/corpus
"""
import argparse
import base64
import glob
import gzip
import hashlib
import json
import os
import re
import subprocess
import unicodedata

_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_CTRL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def clean(text):
    """Deterministic cleaning: NFC, tabs to 4 spaces (code) or kept, no control
    chars, no trailing spaces, at most one blank line in a row."""
    text = unicodedata.normalize("NFC", text)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = _CTRL.sub("", text)
    lines = [ln.rstrip() for ln in text.split("\n")]
    text = "\n".join(lines)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip("\n") + "\n"


def decode(raw):
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def kjv_docs():
    out = subprocess.run(["bible", "-l100000", "gen1:1-rev22:21"],
                         capture_output=True, check=True).stdout
    text = decode(out)
    # Output: "Genesis 1" header lines, blank line, "  1 verse text" lines.
    docs, cur, title = [], [], None
    for line in text.split("\n"):
        if not line.strip():
            continue
        m = re.match(r"^\s+(\d+)\s+(.*)$", line)  # verses are indented
        if m and title is not None:
            cur.append(f"{m.group(1)} {m.group(2).strip()}")
        elif m is None and not line.startswith(" "):
            if title is not None and cur:
                docs.append((title, title + "\n\n" + "\n".join(cur)))
            title, cur = line.strip(), []
        elif cur:
            cur[-1] += " " + line.strip()  # wrapped continuation
    if title is not None and cur:
        docs.append((title, title + "\n\n" + "\n".join(cur)))
    return docs


def fortune_docs():
    docs = []
    base = "/usr/share/games/fortunes"
    for name in sorted(os.listdir(base)):
        path = os.path.join(base, name)
        if (name.endswith((".dat", ".u8")) or os.path.islink(path)
                or not os.path.isfile(path) or name == "ascii-art"):
            continue
        with open(path, "rb") as f:
            parts = decode(f.read()).split("\n%\n")
        for i, p in enumerate(parts):
            p = p.strip("%\n")
            if len(p.strip()) >= 20:
                docs.append((f"{name}/{i}", p))
    return docs


def dict_entries(name):
    """Yields (headword, text) of a dictd database in index order."""
    with gzip.open(f"/usr/share/dictd/{name}.dict.dz", "rb") as f:
        data = f.read()
    seen = set()
    with open(f"/usr/share/dictd/{name}.index", "rb") as f:
        for line in decode(f.read()).split("\n"):
            parts = line.split("\t")
            if len(parts) < 3 or parts[0].startswith("00-database"):
                continue

            def num(s):
                v = 0
                for c in s:
                    v = v * 64 + _B64.index(c)
                return v
            off, ln = num(parts[1]), num(parts[2])
            if off in seen:
                continue
            seen.add(off)
            yield parts[0], decode(data[off:off + ln])


def dedent_entry(text):
    lines = text.split("\n")
    return "\n".join(ln[3:] if ln.startswith("   ") else ln for ln in lines)


def devil_docs():
    return [(w, dedent_entry(t)) for w, t in dict_entries("devil")]


def jargon_docs():
    return [(w, dedent_entry(t)) for w, t in dict_entries("jargon")]


def gcide_docs():
    docs = []
    for i, (w, t) in enumerate(dict_entries("gcide")):
        if i % 12:
            continue
        t = re.sub(r"\s*\[[^\]\n]*Webster[^\]\n]*\]", "", t)
        t = re.sub(r"\s*\[WordNet[^\]\n]*\]", "", t)
        t = re.sub(r"\\[^\\\n]{0,60}\\", "", t)  # pronunciation \Ab*do"men\
        t = t.replace("\"", "").replace("`", "").replace("*", "")
        docs.append((f"{w}/{i}", dedent_entry(t)))
    return docs


def python_docs():
    files = sorted(glob.glob("/usr/lib/python3.11/*.py"))
    docs = []
    for i, path in enumerate(files):
        if i % 2:
            continue
        with open(path, "rb") as f:
            text = decode(f.read()).expandtabs(4)
        docs.append((os.path.basename(path), text))
    return docs


SOURCES = [("kjv", kjv_docs), ("fortune", fortune_docs), ("devil", devil_docs),
           ("jargon", jargon_docs), ("gcide", gcide_docs),
           ("python", python_docs)]


def is_heldout(src, doc_id):
    return hashlib.md5(f"{src}:{doc_id}".encode()).digest()[0] < 5


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="/work/train-work/corpus")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    stats = {}
    with open(os.path.join(args.out, "train.jsonl"), "w") as ft, \
         open(os.path.join(args.out, "val.jsonl"), "w") as fv:
        for src, fn in SOURCES:
            n = [0, 0, 0, 0]
            for doc_id, text in fn():
                text = clean(text)
                if len(text.strip()) < 10:
                    continue
                held = is_heldout(src, doc_id)
                rec = json.dumps({"src": src, "id": doc_id, "text": text},
                                 ensure_ascii=False)
                (fv if held else ft).write(rec + "\n")
                n[held] += 1
                n[2 + held] += len(text)
            stats[src] = {"train_docs": n[0], "val_docs": n[1],
                          "train_chars": n[2], "val_chars": n[3]}
            print(src, stats[src], flush=True)
    with open(os.path.join(args.out, "stats.json"), "w") as f:
        json.dump(stats, f, indent=1)


if __name__ == "__main__":
    main()
