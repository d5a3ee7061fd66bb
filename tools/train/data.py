"""Tokenized corpus: documents as <|bos|> text <|eos|>, concatenated."""
import hashlib
import json
import os

import numpy as np

from bpe import Tokenizer


def tokenize_split(corpus_dir, tok_path, split, work_dir):
    """Returns a uint16 array of the split's tokens, cached in work_dir."""
    with open(tok_path, "rb") as f:
        tag = hashlib.md5(f.read()).hexdigest()[:10]
    cache = os.path.join(work_dir, f"tokens_{split}_{tag}.npy")
    if os.path.exists(cache):
        return np.load(cache)
    tok = Tokenizer.load(tok_path)
    ids = []
    with open(os.path.join(corpus_dir, f"{split}.jsonl")) as f:
        for line in f:
            ids.extend(tok.encode(json.loads(line)["text"], bos=True))
            ids.append(tok.eos_id)
    arr = np.array(ids, dtype=np.uint16)
    np.save(cache, arr)
    return arr
