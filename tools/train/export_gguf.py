#!/usr/bin/python3
"""Writes a trained checkpoint and its tokenizer as a GGUF v3 file.

Written with struct only (no gguf package).  Layout: header, metadata
key/values, tensor infos (offsets relative to the 32-aligned data section),
then the tensor data.  A torch Linear weight [out, in] is stored row-major as
is, with GGUF dims [in, out] (ne0 = contiguous row length).  Tied embeddings:
no output.weight.  Norm weights are always F32.

Usage: /usr/bin/python3 tools/train/export_gguf.py CKPT.pt TOKENIZER.json OUT.gguf [--f16]
"""
import argparse
import struct

import numpy as np
import torch

from bpe import GPT2_PATTERN, Tokenizer  # noqa: F401  (pattern documented)

ALIGN = 32
T_U32, T_I32, T_F32, T_BOOL, T_STR, T_ARR, T_U64 = 4, 5, 6, 7, 8, 9, 10
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def _str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _value(vtype, v):
    if vtype == T_U32:
        return struct.pack("<I", v)
    if vtype == T_I32:
        return struct.pack("<i", v)
    if vtype == T_F32:
        return struct.pack("<f", v)
    if vtype == T_BOOL:
        return struct.pack("<B", 1 if v else 0)
    if vtype == T_STR:
        return _str(v)
    if vtype == T_U64:
        return struct.pack("<Q", v)
    raise ValueError(vtype)


def _kv(key, vtype, v, elem=None):
    out = _str(key) + struct.pack("<I", vtype)
    if vtype == T_ARR:
        out += struct.pack("<IQ", elem, len(v))
        if elem == T_I32:
            out += np.asarray(v, dtype="<i4").tobytes()
        else:
            out += b"".join(_value(elem, x) for x in v)
        return out
    return out + _value(vtype, v)


def gguf_tensors(state, cfg, f16):
    """[(name, np.ndarray)] in GGUF order; arrays already in final dtype."""
    def w(t, keep_f32=False):
        a = t.detach().float().numpy()
        return a.astype(np.float16) if (f16 and not keep_f32) else a

    out = [("token_embd.weight", w(state["tok_embd.weight"]))]
    for i in range(cfg["n_layer"]):
        p = f"blocks.{i}."
        out += [
            (f"blk.{i}.attn_norm.weight", w(state[p + "attn_norm.weight"], True)),
            (f"blk.{i}.attn_q.weight", w(state[p + "wq.weight"])),
            (f"blk.{i}.attn_k.weight", w(state[p + "wk.weight"])),
            (f"blk.{i}.attn_v.weight", w(state[p + "wv.weight"])),
            (f"blk.{i}.attn_output.weight", w(state[p + "wo.weight"])),
            (f"blk.{i}.ffn_norm.weight", w(state[p + "ffn_norm.weight"], True)),
            (f"blk.{i}.ffn_gate.weight", w(state[p + "w_gate.weight"])),
            (f"blk.{i}.ffn_up.weight", w(state[p + "w_up.weight"])),
            (f"blk.{i}.ffn_down.weight", w(state[p + "w_down.weight"])),
        ]
    out.append(("output_norm.weight", w(state["out_norm.weight"], True)))
    return out


def export(ckpt_path, tok_path, out_path, name, f16=False):
    ck = torch.load(ckpt_path, map_location="cpu")
    cfg, state = ck["cfg"], ck["model"]
    tok = Tokenizer.load(tok_path)
    assert tok.n_vocab == cfg["n_vocab"], (tok.n_vocab, cfg["n_vocab"])
    toks, types, merges = tok.gguf_tokens()
    hd = cfg["n_embd"] // cfg["n_head"]
    kvs = [
        _kv("general.architecture", T_STR, "llama"),
        _kv("general.name", T_STR, name),
        _kv("general.file_type", T_U32, 1 if f16 else 0),
        _kv("llama.context_length", T_U32, cfg["n_ctx"]),
        _kv("llama.embedding_length", T_U32, cfg["n_embd"]),
        _kv("llama.block_count", T_U32, cfg["n_layer"]),
        _kv("llama.feed_forward_length", T_U32, cfg["n_ff"]),
        _kv("llama.attention.head_count", T_U32, cfg["n_head"]),
        _kv("llama.attention.head_count_kv", T_U32, cfg["n_kv_head"]),
        _kv("llama.rope.freq_base", T_F32, float(cfg["rope_base"])),
        _kv("llama.rope.dimension_count", T_U32, hd),
        _kv("llama.attention.layer_norm_rms_epsilon", T_F32,
            float(cfg["norm_eps"])),
        _kv("llama.vocab_size", T_U32, cfg["n_vocab"]),
        _kv("tokenizer.ggml.model", T_STR, "gpt2"),
        _kv("tokenizer.ggml.pre", T_STR, "gpt-2"),  # llama.cpp's name for the GPT-2 regex
        _kv("tokenizer.ggml.tokens", T_ARR, toks, T_STR),
        _kv("tokenizer.ggml.token_type", T_ARR, types, T_I32),
        _kv("tokenizer.ggml.merges", T_ARR, merges, T_STR),
        _kv("tokenizer.ggml.bos_token_id", T_U32, tok.bos_id),
        _kv("tokenizer.ggml.eos_token_id", T_U32, tok.eos_id),
        _kv("tokenizer.ggml.padding_token_id", T_U32,
            tok.special_ids["<|pad|>"]),
        _kv("tokenizer.ggml.unknown_token_id", T_U32,
            tok.special_ids["<|unk|>"]),
        _kv("tokenizer.ggml.add_bos_token", T_BOOL, True),
        _kv("tokenizer.ggml.add_eos_token", T_BOOL, False),
        _kv("tokenizer.chat_template", T_STR, CHAT_TEMPLATE),
    ]
    tensors = gguf_tensors(state, cfg, f16)
    write_gguf(out_path, kvs, tensors)
    return sum(a.size for _, a in tensors)


def write_gguf(out_path, kvs, tensors):
    """Header, the encoded key/values (_kv), tensor infos, aligned data.

    tensors: (name, F32 or F16 numpy array) pairs; GGUF dims are the array's
    shape reversed (ne0 = the contiguous last dim)."""
    infos, offset = [], 0
    for tname, a in tensors:
        gtype = 1 if a.dtype == np.float16 else 0
        dims = list(reversed(a.shape))  # ne0 = last (contiguous) torch dim
        infos.append(_str(tname) + struct.pack("<I", len(dims)) +
                     b"".join(struct.pack("<Q", d) for d in dims) +
                     struct.pack("<IQ", gtype, offset))
        offset += (a.nbytes + ALIGN - 1) // ALIGN * ALIGN
    with open(out_path, "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)))
        for kv in kvs:
            f.write(kv)
        for info in infos:
            f.write(info)
        f.write(b"\0" * (-f.tell() % ALIGN))
        for _, a in tensors:
            b = np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<")).tobytes()
            f.write(b + b"\0" * (-len(b) % ALIGN))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ckpt")
    ap.add_argument("tokenizer")
    ap.add_argument("out")
    ap.add_argument("--name", default="pagoda-small")
    ap.add_argument("--f16", action="store_true")
    args = ap.parse_args()
    n = export(args.ckpt, args.tokenizer, args.out, args.name, args.f16)
    print(f"wrote {args.out}: {n} parameters")


if __name__ == "__main__":
    main()
