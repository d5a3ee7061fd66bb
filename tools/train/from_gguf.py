#!/usr/bin/python3
"""Reads a GGUF that export_gguf.py wrote back into what training uses: a
checkpoint (the torch state dict and config) and tokenizer.json.

So a bundled model can be fine-tuned, distilled from or given heads without
the intermediate files of the run that made it (they live outside the
repository).  Only what export_gguf writes is read: GGUF v3, F32/F16 tensors.

Usage:
  /usr/bin/python3 tools/train/from_gguf.py models/pagoda-small.gguf \
      --ckpt /work/train-work/pagoda-small.pt \
      --tokenizer /work/train-work/tokenizer.json
"""
import argparse
import struct

import numpy as np
import torch

from bpe import Tokenizer, bytes_to_unicode

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f",
            7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


class _Reader:
    def __init__(self, data):
        self.data, self.pos = data, 0

    def take(self, fmt):
        v = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return v[0]

    def string(self):
        n = self.take("<Q")
        s = self.data[self.pos:self.pos + n].decode("utf-8")
        self.pos += n
        return s

    def value(self, vtype):
        if vtype in _SCALARS:
            return self.take(_SCALARS[vtype])
        if vtype == 8:
            return self.string()
        if vtype == 9:
            elem, n = self.take("<I"), self.take("<Q")
            return [self.value(elem) for _ in range(n)]
        raise ValueError(f"unknown GGUF value type {vtype}")


def read_gguf(path):
    """(metadata dict, {tensor name: numpy array in torch's shape order})."""
    with open(path, "rb") as f:
        data = f.read()
    r = _Reader(data)
    assert data[:4] == b"GGUF", f"{path}: not a GGUF file"
    r.pos = 4
    version, n_tensors, n_kv = r.take("<I"), r.take("<Q"), r.take("<Q")
    assert version == 3, f"{path}: GGUF version {version}"
    meta = {}
    for _ in range(n_kv):
        key = r.string()
        meta[key] = r.value(r.take("<I"))
    align = meta.get("general.alignment", 32)
    infos = []
    for _ in range(n_tensors):
        name = r.string()
        dims = [r.take("<Q") for _ in range(r.take("<I"))]
        gtype, offset = r.take("<I"), r.take("<Q")
        infos.append((name, dims, gtype, offset))
    base = (r.pos + align - 1) // align * align
    tensors = {}
    for name, dims, gtype, offset in infos:
        assert gtype in (0, 1), f"{name}: only F32/F16 tensors are read"
        dt = np.float32 if gtype == 0 else np.float16
        n = int(np.prod(dims))
        a = np.frombuffer(data, dtype=dt, count=n, offset=base + offset)
        tensors[name] = a.reshape(list(reversed(dims))).astype(np.float32)
    return meta, tensors


def checkpoint_of(meta, tensors):
    """The training checkpoint dict ({"cfg", "model", "step"}) of a model."""
    arch = meta["general.architecture"]
    assert arch == "llama", f"architecture {arch}: only llama is read"

    def k(s):
        return meta[f"llama.{s}"]
    cfg = {"n_vocab": len(meta["tokenizer.ggml.tokens"]),
           "n_ctx": k("context_length"), "n_embd": k("embedding_length"),
           "n_layer": k("block_count"), "n_head": k("attention.head_count"),
           "n_kv_head": k("attention.head_count_kv"),
           "n_ff": k("feed_forward_length"),
           "rope_base": float(k("rope.freq_base")),
           "norm_eps": float(k("attention.layer_norm_rms_epsilon"))}
    assert "output.weight" not in tensors, "untied output: not a tools/train model"
    t = {n: torch.from_numpy(a.copy()) for n, a in tensors.items()}
    state = {"tok_embd.weight": t["token_embd.weight"],
             "out_norm.weight": t["output_norm.weight"]}
    names = {"attn_norm": "attn_norm", "attn_q": "wq", "attn_k": "wk",
             "attn_v": "wv", "attn_output": "wo", "ffn_norm": "ffn_norm",
             "ffn_gate": "w_gate", "ffn_up": "w_up", "ffn_down": "w_down"}
    for i in range(cfg["n_layer"]):
        for g, ours in names.items():
            state[f"blocks.{i}.{ours}.weight"] = t[f"blk.{i}.{g}.weight"]
    return {"cfg": cfg, "model": state, "step": 0}


def tokenizer_of(meta):
    """The Tokenizer whose export wrote these tokens and merges (checked)."""
    u2b = {u: b for b, u in bytes_to_unicode().items()}
    toks = meta["tokenizer.ggml.tokens"]
    ids = {s: i for i, s in enumerate(toks)}
    merges = []
    for m in meta["tokenizer.ggml.merges"]:
        a, b = m.split(" ")
        merges.append((ids[a], ids[b]))
    tok = Tokenizer(merges)
    mine, _, mine_merges = tok.gguf_tokens()
    assert mine == toks and mine_merges == meta["tokenizer.ggml.merges"], \
        "the GGUF's vocabulary is not one bpe.py makes"
    assert all(len(s) == 1 and s in u2b for s in toks[:256])
    return tok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gguf")
    ap.add_argument("--ckpt", help="write the checkpoint here")
    ap.add_argument("--tokenizer", help="write tokenizer.json here")
    args = ap.parse_args()
    meta, tensors = read_gguf(args.gguf)
    if args.ckpt:
        ck = checkpoint_of(meta, tensors)
        torch.save(ck, args.ckpt)
        print(f"wrote {args.ckpt}: {ck['cfg']}")
    if args.tokenizer:
        tokenizer_of(meta).save(args.tokenizer)
        print(f"wrote {args.tokenizer}")


if __name__ == "__main__":
    main()
