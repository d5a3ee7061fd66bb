"""Mean-pools a checkpoint's K and V heads into fewer KV heads (Ainslie et
al. 2023, "GQA"): the starting point of GQA up-training, the same pooling
`pagoda convert --kv-heads N` applies to a GGUF file. Q and O are unchanged;
KV head j of the result is the mean of heads j*g .. j*g+g-1 (g = old/new).

    pool_kv_heads.py CKPT OUT --kv-heads N

Then `train.py --init-from OUT --n-kv-head N ...` up-trains it.
"""
import argparse

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ckpt")
    ap.add_argument("out")
    ap.add_argument("--kv-heads", type=int, required=True)
    args = ap.parse_args()
    ck = torch.load(args.ckpt, map_location="cpu")
    cfg = ck["cfg"]
    old, new = cfg["n_kv_head"], args.kv_heads
    if new <= 0 or old % new != 0:
        raise SystemExit(f"--kv-heads {new} must divide the model's {old} KV heads")
    hd = cfg["n_embd"] // cfg["n_head"]
    g = old // new
    pooled = 0
    for name, w in ck["model"].items():
        if name.endswith("wk.weight") or name.endswith("wv.weight"):
            d = w.shape[1]
            ck["model"][name] = w.view(new, g, hd, d).mean(dim=1).reshape(new * hd, d).contiguous()
            pooled += 1
    if pooled == 0:
        raise SystemExit("no wk/wv weights in the checkpoint")
    cfg["n_kv_head"] = new
    torch.save(ck, args.out)
    print(f"wrote {args.out}: {pooled} matrices pooled, {old} -> {new} KV heads")


if __name__ == "__main__":
    main()
