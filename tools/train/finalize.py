#!/usr/bin/python3
"""Exports a trained checkpoint and writes what checks it: GGUF, reference
outputs (models/<name>.ref.json) and the model card (models/<name>.md).

ref.json holds, for checking an inference engine against this framework:
  greedy:    prompt, prompt ids (with BOS), 32 greedy token ids and text
  tokenize:  texts and their ids (no BOS, special tokens not parsed)
  heldout:   perplexity of models/heldout-sample.txt, llama.cpp style: the
             file is tokenized with BOS, cut into non-overlapping n_ctx-token
             chunks (the tail that does not fill a chunk is dropped), the
             first token of each chunk replaced by BOS, and only the second
             half of each chunk scored (positions n_ctx/2 .. n_ctx-2 predict
             the next token): n_ctx/2 - 1 predictions per chunk.

Usage:
  /usr/bin/python3 tools/train/finalize.py --name pagoda-small --write-heldout
  /usr/bin/python3 tools/train/finalize.py --name pagoda-small-draft \
      --target pagoda-small
"""
import argparse
import json
import math
import os

import numpy as np
import torch
import torch.nn.functional as F

import card
import chat_data
from bpe import Tokenizer
from export_gguf import export
from model import Config, Llama

PROMPTS = ["In the beginning", "And the LORD said unto Moses,",
           "The meaning of life is", "def main():\n",
           "A computer is", "Q: Why did the chicken cross the road?\nA:"]
TOKENIZE_TEXTS = ["Hello, world! It's 2026.", "    return self._value  # ok",
                  "Blessed are the meek: for they shall inherit the earth.",
                  "naïve café — “quoted” 日本語\n\n\ttab", "<|im_start|>user"]


CHAT_PROMPTS = [
    [{"role": "user", "content": "Hello"}],
    [{"role": "user", "content": "Tell me a joke."}],
    [{"role": "user", "content": "What does Genesis 1:3 say?"}],
    [{"role": "user", "content": "Show me a Python function from the "
                                 "hmac module."}],
    [{"role": "system", "content": "You are a helpful assistant."},
     {"role": "user", "content": "What does hacker mean?"},
     {"role": "assistant", "content": "hacker, n. A person who enjoys "
                                      "exploring the details of programmable "
                                      "systems."},
     {"role": "user", "content": "Tell me a joke."}],
    [{"role": "system", "content": chat_data.tools_system_text(["define"])},
     {"role": "user", "content": "What does lamp mean?"}],
]
N_HELDOUT_WORDS = 20


def render_chat(messages):
    """The bundled ChatML template with add_generation_prompt.  Tokenized
    without BOS, as Pagoda's server (and vLLM) tokenize a rendered chat whose
    template writes none."""
    return "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n"
                   for m in messages) + "<|im_start|>assistant\n"


def heldout_words(chat_dir, n):
    """n words defined only in held-out dictionary entries, spread over the
    sorted list (the chat tuning never saw a question about them)."""
    with open(os.path.join(chat_dir, "val_words.json")) as f:
        val = json.load(f)
    with open(os.path.join(chat_dir, "train_words.json")) as f:
        seen = {w.lower() for w in json.load(f)}
    words = [w for w in val if w.lower() not in seen and w.isascii() and
             len(w) >= 3]
    step = max(1, len(words) // n)
    return words[::step][:n]


@torch.no_grad()
def chat_reply(m, tok, messages, n_max=64):
    """Greedy reply ids up to and including <|im_end|> (or n_max tokens)."""
    ids = tok.encode(render_chat(messages), special=True)
    im_end = tok.special_ids["<|im_end|>"]
    out = []
    for _ in range(n_max):
        nxt = int(torch.argmax(m(torch.tensor([ids[-m.cfg.n_ctx:]]))[0, -1]))
        ids.append(nxt)
        out.append(nxt)
        if nxt in (im_end, tok.eos_id):
            break
    return out


def chat_refs(m, tok, chat_dir, before=None):
    """The ref.json chat section: held-out "What does X mean?" questions and
    a few other requests, with the greedy reply (and the reply of the model
    before chat tuning, for the card)."""
    convs = [[{"role": "user", "content": f"What does {w} mean?"}]
             for w in heldout_words(chat_dir, N_HELDOUT_WORDS)]
    out = []
    for i, msgs in enumerate(convs + CHAT_PROMPTS):
        reply = chat_reply(m, tok, msgs)
        e = {"messages": msgs, "heldout_word": i < len(convs),
             "prompt_ids": tok.encode(render_chat(msgs), special=True),
             "reply_ids": reply, "reply_text": tok.decode(reply,
                                                          special=False)}
        if before is not None:
            e["before_text"] = tok.decode(chat_reply(before, tok, msgs),
                                          special=False)
        out.append(e)
    return out


def load_ckpt(path):
    ck = torch.load(path, map_location="cpu")
    m = Llama(Config(**ck["cfg"]))
    m.load_state_dict(ck["model"])
    m.eval()
    return m


def load(work, name):
    ck = torch.load(os.path.join(work, f"{name}.pt"), map_location="cpu")
    m = Llama(Config(**ck["cfg"]))
    m.load_state_dict(ck["model"])
    m.eval()
    return m


@torch.no_grad()
def generate(m, ids, n, temp=0.0, top_k=0, gen=None):
    ids = list(ids)
    out = []
    for _ in range(n):
        logits = m(torch.tensor([ids[-m.cfg.n_ctx:]]))[0, -1]
        if temp <= 0:
            nxt = int(torch.argmax(logits))
        else:
            logits = logits / temp
            if top_k:
                kth = torch.topk(logits, top_k).values[-1]
                logits = logits.masked_fill(logits < kth, float("-inf"))
            nxt = int(torch.multinomial(logits.softmax(-1), 1, generator=gen))
        ids.append(nxt)
        out.append(nxt)
    return out


@torch.no_grad()
def llamacpp_ppl(m, ids, bos_id):
    n_ctx = m.cfg.n_ctx
    first = n_ctx // 2
    nll, cnt = 0.0, 0
    for c in range(len(ids) // n_ctx):
        chunk = list(ids[c * n_ctx:(c + 1) * n_ctx])
        target = torch.tensor(chunk[first + 1:])
        chunk[0] = bos_id
        logits = m(torch.tensor([chunk]))[0]
        lp = F.log_softmax(logits[first:n_ctx - 1].double(), -1)
        nll -= lp.gather(1, target[:, None]).sum().item()
        cnt += len(target)
    return nll / cnt, cnt


def heldout_text(corpus):
    """~8 KB from the held-out split: the first documents of each source."""
    budget = {"kjv": 2600, "fortune": 1400, "devil": 700, "jargon": 1000,
              "gcide": 1000, "python": 1300}
    parts = {k: [] for k in budget}
    with open(os.path.join(corpus, "val.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            left = budget[r["src"]] - sum(len(p) for p in parts[r["src"]])
            if left <= 200:
                continue
            text = r["text"]
            if len(text) > left:
                text = text[:text.rfind("\n", 0, left) + 1]
            if text.strip():
                parts[r["src"]].append(text)
    return "\n".join("\n".join(parts[k]) for k in budget)


@torch.no_grad()
def top1_agreement(draft, target, val, n_ctx, n_windows=24):
    agree, total = 0, 0
    for j in range(min(n_windows, len(val) // n_ctx)):
        x = torch.from_numpy(val[j * n_ctx:(j + 1) * n_ctx].astype(np.int64))
        a = draft(x[None])[0].argmax(-1)
        b = target(x[None])[0].argmax(-1)
        agree += int((a == b).sum())
        total += n_ctx
    return agree / total, total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--name", required=True)
    ap.add_argument("--work", default="/work/train-work")
    ap.add_argument("--tokenizer", default="/work/train-work/tokenizer.json")
    ap.add_argument("--corpus", default="/work/train-work/corpus")
    ap.add_argument("--out-dir", default="models")
    ap.add_argument("--target", help="name of the model a draft serves")
    ap.add_argument("--write-heldout", action="store_true")
    ap.add_argument("--f16", action="store_true")
    ap.add_argument("--chat", help="chat data dir (chat_data.py): adds chat "
                    "replies to ref.json and the card")
    ap.add_argument("--before", help="checkpoint before chat tuning, whose "
                    "replies the card shows beside the tuned ones")
    args = ap.parse_args()
    torch.set_num_threads(1)
    tok = Tokenizer.load(args.tokenizer)
    gguf = os.path.join(args.out_dir, f"{args.name}.gguf")
    export(os.path.join(args.work, f"{args.name}.pt"), args.tokenizer, gguf,
           args.name, args.f16)
    m = load(args.work, args.name)
    with open(os.path.join(args.work, f"{args.name}.train.json")) as f:
        info = json.load(f)

    ref = {"model": os.path.basename(gguf), "n_predict": 32, "greedy": [],
           "tokenize": []}
    for p in PROMPTS:
        ids = tok.encode(p, bos=True)
        out = generate(m, ids, 32)
        ref["greedy"].append({"prompt": p, "prompt_ids": ids,
                              "greedy_ids": out,
                              "greedy_text": tok.decode(out, special=False)})
    for t in TOKENIZE_TEXTS:
        ref["tokenize"].append({"text": t, "ids": tok.encode(t)})

    held_path = os.path.join(args.out_dir, "heldout-sample.txt")
    if args.write_heldout:
        with open(held_path, "w") as f:
            f.write(heldout_text(args.corpus))
    with open(held_path) as f:
        held = f.read()
    held_ids = tok.encode(held, bos=True)
    nll, cnt = llamacpp_ppl(m, held_ids, tok.bos_id)
    ref["heldout"] = {"file": "heldout-sample.txt", "n_tokens": len(held_ids),
                      "n_ctx": m.cfg.n_ctx, "n_scored": cnt, "nll": nll,
                      "ppl": math.exp(nll),
                      "method": "llama.cpp perplexity: BOS-tokenized file, "
                                "non-overlapping n_ctx chunks, chunk[0]=BOS, "
                                "score positions n_ctx/2..n_ctx-2"}
    ref["heldout_ids"] = held_ids
    ref["val"] = {"loss": info["val_loss"], "ppl": info["val_ppl"],
                  "method": info["val_method"]}

    gen = torch.Generator().manual_seed(7)
    samples = []
    for p in PROMPTS:
        ids = tok.encode(p, bos=True)
        samples.append((p, tok.decode(generate(m, ids, 64, 0.8, 40, gen),
                                      special=False)))
    if args.chat:
        before = load_ckpt(args.before) if args.before else None
        ref["chat"] = chat_refs(m, tok, args.chat, before)
    agreement = None
    if args.target:
        from data import tokenize_split
        val = tokenize_split(args.corpus, args.tokenizer, "val", args.work)
        frac, n = top1_agreement(m, load(args.work, args.target), val,
                                 m.cfg.n_ctx)
        agreement = {"target": args.target, "top1_agreement": frac,
                     "positions": n}
        ref["draft_agreement"] = agreement
    with open(os.path.join(args.out_dir, f"{args.name}.ref.json"), "w") as f:
        json.dump(ref, f, indent=1, ensure_ascii=False)
    with open(os.path.join(args.corpus, "stats.json")) as f:
        stats = json.load(f)
    card.write(os.path.join(args.out_dir, f"{args.name}.md"), info, ref,
               samples, agreement, stats, os.path.getsize(gguf), args.f16)
    print(json.dumps({"val_ppl": info["val_ppl"], "heldout_ppl": math.exp(nll),
                      "agreement": agreement}))


if __name__ == "__main__":
    main()
