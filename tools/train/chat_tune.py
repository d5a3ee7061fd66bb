#!/usr/bin/python3
"""Chat tuning: continues a checkpoint on chat conversations (chat_data.py)
mixed with corpus text, at a longer context.

Rows of the batch are either a window of the corpus (every position scored,
so completions do not get worse) or conversations packed back to back, each
rendered with the bundled ChatML template and tokenized as Pagoda's server
tokenizes a rendered chat (BOS, control tokens parsed); in those only the
assistant's tokens and its <|im_end|> are scored.  The context grows from the
checkpoint's to --n-ctx by training at that length (RoPE unchanged).
Half the packed conversations start with BOS and half without: servers
differ (HF/vLLM-style ones tokenize a rendered chat without adding BOS, as
Pagoda does when the template writes none; llama.cpp adds it).

Usage:
  /usr/bin/python3 tools/train/chat_tune.py --init /work/train-work/pagoda-small-base.pt \
      --name pagoda-small --n-ctx 2048 --steps 400 --batch 4 --max-minutes 40
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
from data import tokenize_split
from model import Config, Llama
from train import evaluate


def encode_chat(tok, messages):
    """(ids, scored) of BOS + the rendered conversation; scored marks the
    tokens a model must produce (assistant content and <|im_end|>)."""
    im_start, im_end = tok.special_ids["<|im_start|>"], \
        tok.special_ids["<|im_end|>"]
    nl = tok.encode("\n")
    ids, scored = [tok.bos_id], [False]
    for m in messages:
        head = tok.encode(m["role"] + "\n")
        body = tok.encode(m["content"])
        if tok.encode(m["role"] + "\n" + m["content"]) != head + body:
            return None  # content starting with whitespace: skip it
        mine = m["role"] == "assistant"
        part = [im_start] + head + body + [im_end] + nl
        mask = ([False] * (1 + len(head)) + [mine] * (len(body) + 1) +
                [False] * len(nl))
        ids += part
        scored += mask
    return ids, scored


def load_chats(tok, path):
    out = []
    with open(path) as f:
        for line in f:
            got = encode_chat(tok, json.loads(line)["messages"])
            if got:
                out.append((np.array(got[0], dtype=np.int64),
                            np.array(got[1], dtype=bool)))
    return out


def pack(chats, T, rng):
    """T + 1 tokens of conversations back to back, and their score mask."""
    ids, sc, n = [], [], 0
    while n < T + 1:
        a, m = chats[rng.integers(len(chats))]
        if rng.random() < 0.5:  # as a server that adds no BOS to chats
            a, m = a[1:], m[1:]
        ids.append(a)
        sc.append(m)
        n += len(a)
    return np.concatenate(ids)[:T + 1], np.concatenate(sc)[:T + 1]


@torch.no_grad()
def chat_loss(model, chats, T):
    """Mean NLL of the scored tokens of each conversation (cut at T + 1)."""
    model.eval()
    tot, cnt = 0.0, 0
    for a, m in chats:
        a, m = a[:T + 1], m[:T + 1]
        x = torch.from_numpy(a[None])
        logits = model(x[:, :-1])[0]
        nll = F.cross_entropy(logits, x[0, 1:], reduction="none")
        keep = torch.from_numpy(m[1:])
        tot += nll[keep].sum().item()
        cnt += int(keep.sum())
    model.train()
    return tot / max(cnt, 1), cnt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--init", required=True, help="checkpoint to start from")
    ap.add_argument("--name", required=True)
    ap.add_argument("--corpus", default="/work/train-work/corpus")
    ap.add_argument("--chat", default="/work/train-work/chat")
    ap.add_argument("--tokenizer", default="/work/train-work/tokenizer.json")
    ap.add_argument("--work", default="/work/train-work")
    ap.add_argument("--n-ctx", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--text-rows", type=float, default=0.4,
                    help="fraction of rows that are corpus text")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--seed", type=int, default=4321)
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
    val_chats = load_chats(tok, os.path.join(args.chat, "val.jsonl"))[:100]
    print(f"chats: {len(chats)} train ({sum(len(a) for a, _ in chats)} "
          f"tokens), {len(val_chats)} val", flush=True)

    ck = torch.load(args.init, map_location="cpu")
    cfg = Config(**{**ck["cfg"], "n_ctx": args.n_ctx})
    model = Llama(cfg)
    missing = model.load_state_dict(ck["model"], strict=False)
    assert not missing.unexpected_keys, missing
    assert all("rope" in k or "cos" in k or "sin" in k or "mask" in k
               for k in missing.missing_keys), missing
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))
    T = cfg.n_ctx

    def snapshot():
        return {"chat_loss": chat_loss(model, val_chats, T)[0],
                "text_loss_256": evaluate(model, val, 256, 64)[0],
                "text_loss_ctx": evaluate(model, val, T, 8)[0]}
    before = snapshot()
    print(f"before: {before}", flush=True)
    budget = args.max_minutes * 60
    t0 = time.time()

    def lr_at(step):
        p = step / args.steps
        if budget > 0:
            p = max(p, (time.time() - t0) / budget)
        if step < args.warmup:
            return args.lr * (step + 1) / args.warmup, p
        t = min(1.0, (p - args.warmup / args.steps) /
                (1 - args.warmup / args.steps))
        return args.lr * (0.1 + 0.45 * (1 + math.cos(math.pi * max(t, 0)))), p

    log, step = [], 0
    ckpt = os.path.join(args.work, f"{args.name}.pt")
    for step in range(args.steps):
        rows, masks = [], []
        for _ in range(args.batch):
            if rng.random() < args.text_rows:
                s = rng.integers(0, len(train) - T - 1)
                rows.append(train[s:s + T + 1].astype(np.int64))
                masks.append(np.ones(T + 1, dtype=bool))
            else:
                a, m = pack(chats, T, rng)
                rows.append(a)
                masks.append(m)
        x = torch.from_numpy(np.stack(rows))
        keep = torch.from_numpy(np.stack(masks)[:, 1:]).reshape(-1)
        lr, prog = lr_at(step)
        for g in opt.param_groups:
            g["lr"] = lr
        logits = model(x[:, :-1]).reshape(-1, cfg.n_vocab)
        nll = F.cross_entropy(logits, x[:, 1:].reshape(-1), reduction="none")
        loss = nll[keep].mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        el = time.time() - t0
        if step % 5 == 0:
            print(f"step {step} loss {loss.item():.4f} lr {lr:.2e} {el:.0f}s",
                  flush=True)
        if (step + 1) % args.eval_every == 0:
            vl = chat_loss(model, val_chats[:30], T)[0]
            log.append({"step": step + 1, "train_loss": loss.item(),
                        "val_chat_loss_subset": vl, "elapsed_s": el})
            print(f"eval step {step + 1} val chat loss (30) {vl:.4f}",
                  flush=True)
            torch.save({"cfg": dataclasses.asdict(cfg), "model":
                        model.state_dict(), "step": step + 1}, ckpt)
        if prog >= 1.0:
            print(f"time budget reached at step {step + 1}", flush=True)
            break
    train_s = time.time() - t0
    after = snapshot()
    print(f"after: {after}", flush=True)
    torch.save({"cfg": dataclasses.asdict(cfg), "model": model.state_dict(),
                "step": step + 1}, ckpt)
    vl, n_val = evaluate(model, val, 256)
    info = {"name": args.name, "config": dataclasses.asdict(cfg),
            "params": model.n_params(), "steps": step + 1,
            "batch": args.batch, "tokens_seen": (step + 1) * args.batch * T,
            "train_tokens": int(len(train)), "val_tokens": int(len(val)),
            "train_seconds": round(train_s), "threads": args.threads,
            "lr": args.lr, "warmup": args.warmup, "seed": args.seed,
            "planned_steps": args.steps, "max_minutes": args.max_minutes,
            "chat_tune": {"init": os.path.basename(args.init),
                          "text_rows": args.text_rows,
                          "train_conversations": len(chats),
                          "before": before, "after": after},
            "val_loss": vl, "val_ppl": math.exp(vl), "val_predictions": n_val,
            "val_method": "all non-overlapping 257-token windows of the "
                          "concatenated held-out documents, every position "
                          "scored", "log": log}
    with open(os.path.join(args.work, f"{args.name}.train.json"), "w") as f:
        json.dump(info, f, indent=1)
    print(f"done: {step + 1} steps, {train_s:.0f}s, val loss {vl:.4f}",
          flush=True)


if __name__ == "__main__":
    main()
