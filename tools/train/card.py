"""Writes a model card (markdown) from the training and finalize results."""
import math

SOURCES = {
    "kjv": "King James Bible (Debian `bible-kjv-text`, via the `bible` program)",
    "fortune": "fortune cookies (Debian `fortunes`, `fortunes-min`; no ascii-art)",
    "devil": "Ambrose Bierce, The Devil's Dictionary (Debian `dict-devil`)",
    "jargon": "The Jargon File (Debian `dict-jargon`)",
    "gcide": "Webster 1913 via GCIDE, every 12th entry (Debian `dict-gcide`)",
    "python": "Python 3.11 standard library, every other top-level module "
              "(`/usr/lib/python3.11/*.py`)",
}


def kept_sections(path, generated):
    """Sections of an existing card that card.py does not write (e.g.
    "Medusa heads", added by hand): kept, in order, at the end."""
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        return []
    out, keep = [], False
    for line in text.split("\n"):
        if line.startswith("## "):
            keep = line[3:].strip() not in generated
        if keep:
            out.append(line)
    return out


GENERATED = {"Shape", "Corpus", "Training", "Validation", "Samples", "Chat"}


def write(path, info, ref, samples, agreement, stats, size, f16):
    c = info["config"]
    tune = info.get("chat_tune")
    hd = c["n_embd"] // c["n_head"]
    L = []
    L.append(f"# {info['name']}\n")
    L.append("A small llama-architecture model trained from scratch on CPU with "
             "`tools/train/` (see its README for the exact commands). It is a "
             "test and demo model: it writes text that looks like its corpus, "
             "not text that is true or useful.\n")
    L.append("## Shape\n")
    L.append("| | |\n|---|---|")
    for k, v in [("architecture", "llama (RoPE interleaved/GGML norm, RMSNorm, "
                  "SwiGLU, GQA, tied embeddings)"),
                 ("parameters", f"{info['params']:,}"),
                 ("vocabulary", f"{c['n_vocab']} (byte-level BPE, GPT-2 "
                  "pre-tokenizer, trained on the same corpus)"),
                 ("context", c["n_ctx"]), ("embedding", c["n_embd"]),
                 ("layers", c["n_layer"]),
                 ("heads / kv heads / head dim",
                  f"{c['n_head']} / {c['n_kv_head']} / {hd}"),
                 ("feed-forward", c["n_ff"]),
                 ("rope base / rms eps", f"{c['rope_base']} / {c['norm_eps']:.6g}"),
                 ("file", f"{'F16' if f16 else 'F32'} GGUF, "
                  f"{size / 1e6:.1f} MB")]:
        L.append(f"| {k} | {v} |")
    L.append("\nSpecial tokens (control): `<|bos|>` (BOS), `<|eos|>` (EOS), "
             "`<|pad|>`, `<|im_start|>`, `<|im_end|>`, `<|unk|>`; a ChatML "
             "chat template is included" + (" and the model is tuned to chat "
                                           "in it (see Chat below).\n" if tune
                                           else "; the draft was distilled on "
                                           "conversations in it.\n"
                                           if info.get("distill") else
                                           ", though the model never saw "
                                           "chat data.\n"))
    L.append("## Corpus\n")
    L.append("Built by `tools/train/corpus.py` from installed Debian packages; "
             "a document goes to the held-out split when the first byte of "
             "md5(`source:id`) is < 5 (about 2%).\n")
    L.append("| source | train docs | train chars | held-out docs | held-out chars |")
    L.append("|---|---|---|---|---|")
    for k, s in stats.items():
        L.append(f"| {SOURCES.get(k, k)} | {s['train_docs']} | "
                 f"{s['train_chars']:,} | {s['val_docs']} | {s['val_chars']:,} |")
    L.append(f"\nTokens: {info['train_tokens']:,} train, "
             f"{info['val_tokens']:,} held-out (each document is "
             "`<|bos|>` text `<|eos|>`).\n")
    L.append("## Training\n")
    if tune:
        L.append(f"Chat tuning of `{tune['init']}` (the base model, trained on "
                 "the corpus at context 256) by `tools/train/chat_tune.py`: "
                 f"rows of {c['n_ctx']} tokens, {100 * tune['text_rows']:.0f}% "
                 "corpus text (every token scored) and the rest "
                 f"conversations from `tools/train/chat_data.py` "
                 f"({tune['train_conversations']:,} made from the train split; "
                 "only the assistant's tokens scored), packed back to back. "
                 "The context grew from 256 by training at the new length "
                 "(RoPE unchanged).\n")
        for i, ph in enumerate(tune.get("phases", [])):
            L.append(f"- phase {i + 1}: {ph['steps']} steps from "
                     f"`{ph['init']}`, peak lr {ph['lr']}, "
                     f"{ph['seconds'] / 60:.1f} min: {ph['note']}")
    dist = info.get("distill")
    if dist:
        L.append(f"Distillation of `{dist['init']}` (the base draft, trained on "
                 "the corpus at context 256) from the target "
                 f"`{dist['target']}` by `tools/train/distill_draft.py`: "
                 f"rows of {c['n_ctx']} tokens, "
                 f"{100 * dist['text_rows']:.0f}% corpus text and the rest "
                 "packed conversations from `tools/train/chat_data.py`, "
                 "loss KL(p_target || q_draft) at every position (the target "
                 "frozen), which is what speculative decoding's acceptance "
                 "rate depends on.\n")
    L.append(f"- steps: {info['steps']} x batch {info['batch']} x "
             f"{c['n_ctx']} tokens = **{info['tokens_seen']:,} tokens seen** "
             f"({info['tokens_seen'] / info['train_tokens']:.2f} epochs)")
    L.append(f"- time: **{info['train_seconds'] / 60:.1f} min** on "
             f"{info['threads']} CPU thread{'s' if info['threads'] > 1 else ''} (torch {info.get('torch', '1.13')}, "
             "OpenBLAS), shared machine")
    L.append(f"- AdamW (0.9, 0.95), weight decay 0.1, peak lr {info['lr']}, "
             f"{info['warmup']} warmup steps, cosine to 10%, grad clip 1.0, "
             f"seed {info['seed']}")
    L.append("\n## Validation\n")
    L.append(f"- held-out split: loss **{info['val_loss']:.4f}** nats/token, "
             f"perplexity **{info['val_ppl']:.2f}** ({info['val_predictions']:,}"
             f" predictions; {info['val_method']})")
    h = ref["heldout"]
    L.append(f"- `models/heldout-sample.txt` ({h['n_tokens']} tokens with BOS): "
             f"perplexity **{h['ppl']:.4f}** (loss {h['nll']:.6f}, "
             f"{h['n_scored']} predictions), llama.cpp style: non-overlapping "
             f"{h['n_ctx']}-token chunks, first token of each chunk set to BOS, "
             "second half of each chunk scored. `pagoda perplexity` on that "
             "file should match this.")
    if agreement:
        L.append(f"- top-1 agreement with {agreement['target']}: "
                 f"**{100 * agreement['top1_agreement']:.1f}%** of "
                 f"{agreement['positions']:,} held-out positions (greedy token "
                 "of both models equal given the same prefix); this predicts "
                 "the speculative-decoding acceptance rate at temperature 0.")
    if tune:
        b, a = tune["before"], tune["after"]
        L.append("\nBefore / after chat tuning (held-out data):\n")
        L.append("| loss (nats/token) | before | after |\n|---|---|---|")
        L.append(f"| assistant tokens of 100 held-out conversations | "
                 f"{b['chat_loss']:.3f} | {a['chat_loss']:.3f} |")
        L.append(f"| held-out text, 64 windows of 256 | "
                 f"{b['text_loss_256']:.3f} | {a['text_loss_256']:.3f} |")
        L.append(f"| held-out text, 8 windows of {c['n_ctx']} | "
                 f"{b['text_loss_ctx']:.3f} | {a['text_loss_ctx']:.3f} |")
    if dist:
        b, a = dist["before"], dist["after"]
        L.append("\nBefore / after distillation (held-out: 8 text windows "
                 "of 512 tokens and 8 of packed conversations):\n")
        L.append("| | before | after |\n|---|---|---|")
        for k, what in [("text_top1", "top-1 agreement with the target, text"),
                        ("chat_top1", "top-1 agreement, conversations"),
                        ("text_accept_t1", "expected acceptance at "
                         "temperature 1 (sum min(p, q)), text"),
                        ("chat_accept_t1", "expected acceptance at "
                         "temperature 1, conversations"),
                        ("text_loss_256", "own loss on held-out text, 64 "
                         "windows of 256 (nats/token)")]:
            L.append(f"| {what} | {b[k]:.3f} | {a[k]:.3f} |")
    key = "val_chat_loss_subset" if tune else "val_loss_subset"
    if dist:
        L.append("\nDuring training (train loss = KL in nats/token; val = "
                 "1 - top-1 agreement on 4 held-out text windows):\n")
    else:
        L.append("\nLoss during training (validation on " +
                 ("30 held-out conversations" if tune else
                  "32 held-out windows") + "):\n")
    L.append("| step | train loss | val loss | min |\n|---|---|---|---|")
    for e in info["log"]:
        L.append(f"| {e['step']} | {e['train_loss']:.3f} | "
                 f"{e[key]:.3f} | {e['elapsed_s'] / 60:.1f} |")
    L.append("\n## Samples\n")
    L.append("Greedy (temperature 0, 32 tokens; these are the reference "
             "continuations in `" + info["name"] + ".ref.json`):\n")
    for g in ref["greedy"]:
        L.append("```\n" + g["prompt"] + g["greedy_text"] + "\n```")
    L.append("\nSampled (temperature 0.8, top-k 40, torch seed 7, 64 tokens):\n")
    for p, s in samples:
        L.append("```\n" + p + s + "\n```")
    if ref.get("chat"):
        L.append("\n## Chat\n")
        n = sum(1 for e in ref["chat"] if e["heldout_word"])
        good = sum(1 for e in ref["chat"] if e["heldout_word"] and
                   e["reply_text"].strip())
        L.append(f"Greedy replies through the chat template (the reference "
                 f"replies in `{info['name']}.ref.json`; a test checks Pagoda "
                 f"gives the same). {good} of the {n} \"What does X mean?\" "
                 "questions about words defined only in held-out entries get "
                 "a non-empty reply. Before = the base model, same prompt.\n")
        for e in ref["chat"]:
            q = e["messages"][-1]["content"]
            if len(e["messages"]) > 1:
                q = f"({len(e['messages']) - 1} earlier messages) " + q
            L.append("```\n> " + q.replace("\n", "\n> ") + "\n" +
                     e["reply_text"] + "\n```")
            if "before_text" in e:
                L.append("before: `" + (e["before_text"].replace("\n", " ")
                                        .strip()[:150] or "(empty)") + "`\n")
    L += [""] + kept_sections(path, GENERATED)
    with open(path, "w") as f:
        f.write("\n".join(L).rstrip("\n") + "\n")
    return math.exp(info["val_loss"])
