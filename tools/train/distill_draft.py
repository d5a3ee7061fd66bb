#!/usr/bin/python3
"""Distills a draft model from its target (knowledge distillation).

Speculative decoding accepts a drafted token with probability
min(1, p(x)/q(x)) (greedy: when the draft's argmax is the target's), so a
draft is as good as its distribution q is close to the target's p — not as
its fit to the corpus.  This trains the draft on the target's full
next-token distributions: loss = KL(p || q) at every position of rows drawn
as in chat_tune.py (corpus text and packed conversations), at the target's
context.  Reports top-1 agreement (the greedy acceptance rate) and the
expected acceptance sum_x min(p(x), q(x)) (the rate at temperature 1) on
held-out text and conversations, before and after.

Usage:
  /usr/bin/python3 tools/train/distill_draft.py \
      --target /work/train-work/pagoda-small.pt \
      --init /work/train-work/pagoda-small-draft-base.pt \
      --name pagoda-small-draft --steps 500 --batch 2 --max-minutes 20
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

from bpe import Tokenizer
from chat_tune import load_chats, pack
from data import tokenize_split
from model import Config, Llama
from train import evaluate


def load_model(path, n_ctx=None):
    ck = torch.load(path, map_location="cpu")
    cfg = Config(**{**ck["cfg"], **({"n_ctx": n_ctx} if n_ctx else {})})
    m = Llama(cfg)
    m.load_state_dict(ck["model"], strict=False)
    return m


@torch.no_grad()
def agreement(draft, target, rows):
    """(top-1 agreement, expected acceptance at temperature 1) over rows."""
    draft.eval()
    same, acc, n = 0, 0.0, 0
    for r in rows:
        x = torch.from_numpy(r[None])
        p = target(x)[0].softmax(-1)
        q = draft(x)[0].softmax(-1)
        same += int((p.argmax(-1) == q.argmax(-1)).sum())
        acc += torch.minimum(p, q).sum().item()
        n += r.shape[0]
    draft.train()
    return same / n, acc / n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", required=True, help="target checkpoint")
    ap.add_argument("--init", required=True, help="draft checkpoint to start "
                    "from (its shape is kept)")
    ap.add_argument("--name", required=True)
    ap.add_argument("--corpus", default="/work/train-work/corpus")
    ap.add_argument("--chat", default="/work/train-work/chat")
    ap.add_argument("--tokenizer", default="/work/train-work/tokenizer.json")
    ap.add_argument("--work", default="/work/train-work")
    ap.add_argument("--n-ctx", type=int, help="context (default: the "
                    "target's)")
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--text-rows", type=float, default=0.5)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--seed", type=int, default=99)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--max-minutes", type=float, default=0)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    tok = Tokenizer.load(args.tokenizer)
    train = tokenize_split(args.corpus, args.tokenizer, "train", args.work)
    val = tokenize_split(args.corpus, args.tokenizer, "val", args.work)
    chats = load_chats(tok, os.path.join(args.chat, "train.jsonl"))
    val_chats = load_chats(tok, os.path.join(args.chat, "val.jsonl"))

    target = load_model(args.target, args.n_ctx)
    target.eval()
    T = target.cfg.n_ctx
    draft = load_model(args.init, T)
    cfg = draft.cfg
    for p in target.parameters():
        p.requires_grad_(False)

    # Held-out rows: 8 text windows of 512 and 8 packed conversations.
    vrng = np.random.default_rng(5)
    held_text = [val[i * 512:i * 512 + 512].astype(np.int64)
                 for i in range(8)]
    held_chat = [pack(val_chats, 511, vrng)[0] for _ in range(8)]

    def snapshot():
        t1, ta = agreement(draft, target, held_text)
        c1, ca = agreement(draft, target, held_chat)
        return {"text_top1": t1, "text_accept_t1": ta, "chat_top1": c1,
                "chat_accept_t1": ca,
                "text_loss_256": evaluate(draft, val, 256, 64)[0]}
    before = snapshot()
    print(f"before: {before}", flush=True)

    decay = [p for n, p in draft.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in draft.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))
    budget = args.max_minutes * 60
    t0 = time.time()
    log, step = [], 0
    ckpt = os.path.join(args.work, f"{args.name}.pt")
    for step in range(args.steps):
        p = step / args.steps
        if budget > 0:
            p = max(p, (time.time() - t0) / budget)
        lr = args.lr * (0.1 + 0.45 * (1 + math.cos(math.pi * min(p, 1.0))))
        if step < args.warmup:
            lr = args.lr * (step + 1) / args.warmup
        for g in opt.param_groups:
            g["lr"] = lr
        rows = []
        for _ in range(args.batch):
            if rng.random() < args.text_rows:
                s = rng.integers(0, len(train) - T)
                rows.append(train[s:s + T].astype(np.int64))
            else:
                rows.append(pack(chats, T - 1, rng)[0])
        x = torch.from_numpy(np.stack(rows))
        with torch.no_grad():
            logp = F.log_softmax(target(x), -1)
        logq = F.log_softmax(draft(x), -1)
        loss = (logp.exp() * (logp - logq)).sum(-1).mean()  # KL(p || q)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0)
        opt.step()
        el = time.time() - t0
        if step % 10 == 0:
            print(f"step {step} kl {loss.item():.4f} lr {lr:.2e} {el:.0f}s",
                  flush=True)
        if (step + 1) % args.eval_every == 0:
            t1, _ = agreement(draft, target, held_text[:4])
            log.append({"step": step + 1, "train_loss": loss.item(),
                        "val_loss_subset": 1 - t1, "elapsed_s": el})
            print(f"eval step {step + 1} text top-1 agreement {t1:.4f}",
                  flush=True)
            torch.save({"cfg": dataclasses.asdict(cfg), "model":
                        draft.state_dict(), "step": step + 1}, ckpt)
        if p >= 1.0:
            print(f"time budget reached at step {step + 1}", flush=True)
            break
    train_s = time.time() - t0
    after = snapshot()
    print(f"after: {after}", flush=True)
    torch.save({"cfg": dataclasses.asdict(cfg), "model": draft.state_dict(),
                "step": step + 1}, ckpt)
    vl, n_val = evaluate(draft, val, 256)
    info = {"name": args.name, "config": dataclasses.asdict(cfg),
            "params": draft.n_params(), "steps": step + 1,
            "batch": args.batch, "tokens_seen": (step + 1) * args.batch * T,
            "train_tokens": int(len(train)), "val_tokens": int(len(val)),
            "train_seconds": round(train_s), "threads": args.threads,
            "lr": args.lr, "warmup": args.warmup, "seed": args.seed,
            "planned_steps": args.steps, "max_minutes": args.max_minutes,
            "distill": {"init": os.path.basename(args.init),
                        "target": os.path.basename(args.target),
                        "text_rows": args.text_rows,
                        "before": before, "after": after},
            "val_loss": vl, "val_ppl": math.exp(vl), "val_predictions": n_val,
            "val_method": "all non-overlapping 257-token windows of the "
                          "concatenated held-out documents, every position "
                          "scored", "log": log}
    with open(os.path.join(args.work, f"{args.name}.train.json"), "w") as f:
        json.dump(info, f, indent=1)
    print(f"done: {step + 1} steps, {train_s:.0f}s", flush=True)


if __name__ == "__main__":
    main()
