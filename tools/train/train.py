#!/usr/bin/python3
"""Trains a small llama model on the corpus; writes a checkpoint.

Fixed seeds (torch + numpy); AdamW, linear warmup then cosine decay to 10%;
random 256-token windows of the concatenated training documents.  The run is
deterministic for a given step count; --max-minutes is a safety stop only.

Usage (see README.md):
  OPENBLAS_NUM_THREADS=1 /usr/bin/python3 tools/train/train.py \
      --name pagoda-small --n-embd 256 --n-layer 5 --n-head 8 --n-kv-head 4 \
      --n-ff 640 --steps 800 --batch 8 --lr 2e-3
"""
import argparse
import dataclasses
import json
import math
import os
import time

import numpy as np
import torch
import torch.nn.functional as F

from data import tokenize_split
from model import Config, Llama


def evaluate(model, val, n_ctx, max_windows=None):
    """Mean next-token NLL over non-overlapping n_ctx+1 windows of val."""
    model.eval()
    n = (len(val) - 1) // n_ctx
    if max_windows:
        n = min(n, max_windows)
    tot, cnt = 0.0, 0
    with torch.no_grad():
        for i in range(0, n, 8):
            rows = [val[j * n_ctx:j * n_ctx + n_ctx + 1]
                    for j in range(i, min(n, i + 8))]
            x = torch.from_numpy(np.stack(rows).astype(np.int64))
            logits = model(x[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                   x[:, 1:].reshape(-1), reduction="sum")
            tot += loss.item()
            cnt += x[:, 1:].numel()
    model.train()
    return tot / cnt, cnt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--name", required=True)
    ap.add_argument("--corpus", default="/work/train-work/corpus")
    ap.add_argument("--tokenizer", default="/work/train-work/tokenizer.json")
    ap.add_argument("--work", default="/work/train-work")
    ap.add_argument("--n-ctx", type=int, default=256)
    ap.add_argument("--n-embd", type=int, default=256)
    ap.add_argument("--n-layer", type=int, default=5)
    ap.add_argument("--n-head", type=int, default=8)
    ap.add_argument("--n-kv-head", type=int, default=4)
    ap.add_argument("--n-ff", type=int, default=640)
    ap.add_argument("--steps", type=int, default=800)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--max-minutes", type=float, default=0,
                    help="time budget: the schedule's progress is "
                         "max(step/steps, elapsed/budget), so a slow machine "
                         "ends the cosine early instead of being cut mid-way")
    ap.add_argument("--init-from", help="checkpoint to continue from (weights "
                    "and step; the optimizer restarts with a short warmup)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    train = tokenize_split(args.corpus, args.tokenizer, "train", args.work)
    val = tokenize_split(args.corpus, args.tokenizer, "val", args.work)
    print(f"tokens: train {len(train)}, val {len(val)}", flush=True)

    cfg = Config(n_vocab=4096, n_ctx=args.n_ctx, n_embd=args.n_embd,
                 n_layer=args.n_layer, n_head=args.n_head,
                 n_kv_head=args.n_kv_head, n_ff=args.n_ff)
    model = Llama(cfg)
    print(f"config {cfg}, params {model.n_params()}", flush=True)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))

    start, warm0, t_prev = 0, 0, 0.0
    if args.init_from:
        ck = torch.load(args.init_from, map_location="cpu")
        model.load_state_dict(ck["model"])
        start, warm0 = ck["step"], ck["step"]
        t_prev = ck.get("elapsed_s", 0.0)
        rng = np.random.default_rng(args.seed + start)
        print(f"continuing from {args.init_from} at step {start}", flush=True)
    budget = args.max_minutes * 60

    def progress(step, el):
        p = step / args.steps
        return max(p, el / budget) if budget > 0 else p

    def lr_at(step, el):
        p0 = args.warmup / args.steps
        t = min(1.0, max(0.0, (progress(step, el) - p0) / (1 - p0)))
        lr = args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))
        if warm0 == 0 and step < args.warmup:
            return args.lr * (step + 1) / args.warmup
        if warm0 > 0 and step - warm0 < 20:  # fresh optimizer: re-warm
            return lr * (step - warm0 + 1) / 20
        return lr

    T = cfg.n_ctx
    ckpt = os.path.join(args.work, f"{args.name}.pt")
    log = []
    t0 = time.time() - t_prev
    step = start
    el = t_prev
    for step in range(start, args.steps):
        starts = rng.integers(0, len(train) - T - 1, size=args.batch)
        x = torch.from_numpy(np.stack([train[s:s + T + 1] for s in starts])
                             .astype(np.int64))
        lr = lr_at(step, time.time() - t0)
        for g in opt.param_groups:
            g["lr"] = lr
        logits = model(x[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, cfg.n_vocab),
                               x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        el = time.time() - t0
        if step % 10 == 0:
            print(f"step {step} loss {loss.item():.4f} lr {lr:.2e} "
                  f"{el:.0f}s", flush=True)
        if (step + 1) % args.eval_every == 0 or step + 1 == args.steps:
            vl, _ = evaluate(model, val, T, max_windows=32)
            log.append({"step": step + 1, "train_loss": loss.item(),
                        "val_loss_subset": vl, "elapsed_s": el})
            print(f"eval step {step + 1} val_loss(32 windows) {vl:.4f} "
                  f"ppl {math.exp(vl):.1f}", flush=True)
            torch.save({"cfg": dataclasses.asdict(cfg), "elapsed_s": el,
                        "model": model.state_dict(), "step": step + 1}, ckpt)
        if progress(step + 1, el) >= 1.0:
            print(f"time budget reached at step {step + 1}", flush=True)
            break
    train_s = time.time() - t0
    steps_done = step + 1
    vl, n_val = evaluate(model, val, T)
    info = {"name": args.name, "config": dataclasses.asdict(cfg),
            "params": model.n_params(), "steps": steps_done,
            "batch": args.batch, "tokens_seen": steps_done * args.batch * T,
            "train_tokens": int(len(train)), "val_tokens": int(len(val)),
            "train_seconds": round(train_s), "threads": args.threads,
            "lr": args.lr, "warmup": args.warmup, "seed": args.seed,
            "planned_steps": args.steps, "max_minutes": args.max_minutes,
            "init_from": args.init_from and {"step": start},
            "val_loss": vl, "val_ppl": math.exp(vl), "val_predictions": n_val,
            "val_method": f"all non-overlapping {T + 1}-token windows of the "
                          "concatenated held-out documents, every position "
                          "scored", "log": log}
    torch.save({"cfg": dataclasses.asdict(cfg), "model": model.state_dict(),
                "step": steps_done}, ckpt)
    with open(os.path.join(args.work, f"{args.name}.train.json"), "w") as f:
        json.dump(info, f, indent=1)
    print(f"done: {steps_done} steps, {train_s:.0f}s, val loss {vl:.4f} "
          f"ppl {math.exp(vl):.2f}", flush=True)


if __name__ == "__main__":
    main()
