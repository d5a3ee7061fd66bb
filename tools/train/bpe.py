#!/usr/bin/python3
"""Byte-level BPE (GPT-2 style) trained on the corpus.

Pre-tokenizer: the GPT-2 regex (tokenizer.ggml.pre = "gpt-2", as llama.cpp names it).  Token strings
use GPT-2's byte-to-unicode mapping, so the GGUF vocabulary is exactly what
llama.cpp-style "gpt2" tokenizers expect.  Vocabulary layout:
  ids 0..255      single bytes, in byte order
  ids 256..       merges, in rank order (merge i makes token 256 + i)
  last ids        special tokens (control): see SPECIALS
Special tokens are matched in text only when encode(..., special=True).

Usage: /usr/bin/python3 tools/train/bpe.py --corpus DIR --vocab 4096 --out tok.json
"""
import argparse
import collections
import heapq
import json
import time

import regex

GPT2_PATTERN = (r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+"""
                r"""| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")
_PAT = regex.compile(GPT2_PATTERN)
SPECIALS = ["<|bos|>", "<|eos|>", "<|pad|>", "<|im_start|>", "<|im_end|>",
            "<|unk|>"]


def bytes_to_unicode():
    """GPT-2's reversible map from bytes to printable unicode characters."""
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) +
          list(range(0xAE, 0x100)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def pretokenize(text):
    return _PAT.findall(text)


def train(texts, vocab_size, log_every=500):
    """Learns vocab_size - 256 - len(SPECIALS) merges; returns [(a, b)] ids."""
    counts = collections.Counter()
    for t in texts:
        counts.update(pretokenize(t))
    words = [list(w.encode("utf-8")) for w in counts]
    freqs = list(counts.values())
    pair_count = collections.defaultdict(int)
    pair_where = collections.defaultdict(set)
    for wi, w in enumerate(words):
        for p in zip(w, w[1:]):
            pair_count[p] += freqs[wi]
            pair_where[p].add(wi)
    heap = [(-c, p) for p, c in pair_count.items()]
    heapq.heapify(heap)
    n_merges = vocab_size - 256 - len(SPECIALS)
    merges = []
    known = {bytes([b]) for b in range(256)}
    tok_bytes = [bytes([b]) for b in range(256)]
    t0 = time.time()
    while len(merges) < n_merges and heap:
        negc, pair = heapq.heappop(heap)
        if pair_count.get(pair, 0) != -negc or negc == 0:
            continue  # stale heap entry
        merged = tok_bytes[pair[0]] + tok_bytes[pair[1]]
        if merged in known:  # would duplicate a token string: never merge
            pair_count[pair] = 0
            continue
        known.add(merged)
        tok_bytes.append(merged)
        new_id = 256 + len(merges)
        merges.append(pair)
        touched = set()
        for wi in list(pair_where[pair]):
            w, f = words[wi], freqs[wi]
            for p in zip(w, w[1:]):
                pair_count[p] -= f
                pair_where[p].discard(wi)
                touched.add(p)
            nw, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and w[i] == pair[0] and w[i + 1] == pair[1]:
                    nw.append(new_id)
                    i += 2
                else:
                    nw.append(w[i])
                    i += 1
            words[wi] = nw
            for p in zip(nw, nw[1:]):
                pair_count[p] += f
                pair_where[p].add(wi)
                touched.add(p)
        for p in touched:
            c = pair_count.get(p, 0)
            if c <= 0:
                pair_count.pop(p, None)
                pair_where.pop(p, None)
            else:
                heapq.heappush(heap, (-c, p))
        if log_every and len(merges) % log_every == 0:
            print(f"bpe: {len(merges)} merges, {time.time() - t0:.0f}s",
                  flush=True)
    return merges


class Tokenizer:
    def __init__(self, merges):
        self.merges = [tuple(m) for m in merges]
        self.rank = {m: i for i, m in enumerate(self.merges)}
        self.token_bytes = [bytes([b]) for b in range(256)]
        for a, b in self.merges:
            self.token_bytes.append(self.token_bytes[a] + self.token_bytes[b])
        self.special_ids = {}
        for s in SPECIALS:
            self.special_ids[s] = len(self.token_bytes)
            self.token_bytes.append(s.encode("utf-8"))
        self.bos_id = self.special_ids["<|bos|>"]
        self.eos_id = self.special_ids["<|eos|>"]
        self.n_vocab = len(self.token_bytes)
        self._cache = {}
        self._special_re = regex.compile(
            "(" + "|".join(regex.escape(s) for s in SPECIALS) + ")")

    @staticmethod
    def load(path):
        with open(path) as f:
            return Tokenizer(json.load(f)["merges"])

    def save(self, path):
        with open(path, "w") as f:
            json.dump({"pattern": GPT2_PATTERN, "specials": SPECIALS,
                       "merges": [list(m) for m in self.merges]}, f)

    def _encode_word(self, word):
        ids = self._cache.get(word)
        if ids is not None:
            return ids
        ids = list(word.encode("utf-8"))
        while len(ids) > 1:
            best, bi = None, -1
            for i in range(len(ids) - 1):
                r = self.rank.get((ids[i], ids[i + 1]))
                if r is not None and (best is None or r < best):
                    best, bi = r, i
            if best is None:
                break
            ids = ids[:bi] + [256 + best] + ids[bi + 2:]
        if len(self._cache) < 500000:
            self._cache[word] = ids
        return ids

    def encode(self, text, bos=False, special=False):
        out = [self.bos_id] if bos else []
        parts = self._special_re.split(text) if special else [text]
        for part in parts:
            if special and part in self.special_ids:
                out.append(self.special_ids[part])
                continue
            for w in pretokenize(part):
                out.extend(self._encode_word(w))
        return out

    def decode(self, ids, special=True):
        """Text of ids; special=False leaves control tokens out (as an
        engine printing generated text does)."""
        first_special = self.n_vocab - len(SPECIALS)
        return b"".join(self.token_bytes[i] for i in ids
                        if special or i < first_special).decode(
            "utf-8", errors="replace")

    def gguf_tokens(self):
        """Token strings (byte-to-unicode mapped), types and merge strings."""
        b2u = bytes_to_unicode()
        toks, types = [], []
        for i, tb in enumerate(self.token_bytes):
            if i >= self.n_vocab - len(SPECIALS):
                toks.append(tb.decode("utf-8"))
                types.append(3)  # control
            else:
                toks.append("".join(b2u[b] for b in tb))
                types.append(1)  # normal
        merges = [toks[a] + " " + toks[b] for a, b in self.merges]
        return toks, types, merges


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", default="/work/train-work/corpus")
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--out", default="/work/train-work/tokenizer.json")
    args = ap.parse_args()
    texts = []
    with open(f"{args.corpus}/train.jsonl") as f:
        for line in f:
            texts.append(json.loads(line)["text"])
    t0 = time.time()
    merges = train(texts, args.vocab)
    tok = Tokenizer(merges)
    tok.save(args.out)
    print(f"bpe: vocab {tok.n_vocab}, {len(merges)} merges, "
          f"{time.time() - t0:.0f}s -> {args.out}")


if __name__ == "__main__":
    main()
