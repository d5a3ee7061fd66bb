#!/usr/bin/python3
"""Chat conversations made from the corpus' own structure, for chat tuning.

Every answer is text of the corpus, asked for in a way its structure allows:
  dictionaries (Devil's Dictionary, Jargon File, Webster 1913):
      "What does X mean?" (and other wordings) -> X's entry, first paragraph
  fortunes:       "Tell me a joke." / "Give me a quote." ... -> a fortune
  scripture:      "What does Genesis 16:3 say?" / "Read me Exodus 3:1-4." -> verses
  Python modules: "Show me a Python function from X." / "Write X in Python."
                  -> a top-level function or method of module X
  tool calls:     the system text Pagoda's server writes for `tools` (see
                  src/server/tool_calls.cc, tools_system_text), a request the
                  tool answers, the <tool_call> the model must write, the
                  <tool_response> and an answer from it; and requests the tools
                  do not cover, answered directly.
  greetings:      a few fixed exchanges about what the model can do.
Conversations have 1..many turns (up to a token budget) so the model learns
to answer the last question with a long history before it.  The split follows
the corpus: questions about held-out documents only appear in val.jsonl.

Usage:
  /usr/bin/python3 tools/train/chat_data.py --corpus /work/train-work/corpus \
      --out /work/train-work/chat
"""
import argparse
import json
import os
import random
import re

SYSTEMS = ["You are a helpful assistant.", "You are Pagoda, a small model "
           "that knows old dictionaries, fortunes, the King James Bible and "
           "some Python.", "Answer briefly.", "You are a helpful assistant. "
           "Answer the user's questions."]

DEFINE_QS = ["What does {w} mean?", "What does \"{w}\" mean?", "Define {w}.",
             "What is the meaning of {w}?", "What is {w}?", "{w}?",
             "Can you tell me what {w} means?", "Explain {w}.",
             "what does {w} mean", "Meaning of {w}?"]
JOKE_QS = ["Tell me a joke.", "Tell me something funny.", "Give me a quote.",
           "Tell me a fortune.", "Say something wise.", "Another one.",
           "Tell me a joke", "Do you know a good quote?", "Cheer me up.",
           "Give me a fortune cookie."]
VERSE_QS = ["What does {r} say?", "Read me {r}.", "Quote {r}.", "{r}?",
            "What is written in {r}?", "Show me {r}."]
CODE_QS = ["Show me a Python function from the {m} module.",
           "Write the function {f} in Python.", "Show me {f} from {m}.",
           "How is {f} written in Python's {m} module?",
           "Give me some Python code."]
GREETINGS = [
    ("Hello", "Hello! Ask me what a word means, for a joke or a quote, for a "
              "Bible verse or for some Python code."),
    ("Hi", "Hi! What would you like to know? I can define words, tell a "
           "joke, quote scripture or show Python code."),
    ("Hi!", "Hello! Ask me what a word means, or ask for a joke."),
    ("hello", "Hello! What word shall I define?"),
    ("Who are you?", "I am Pagoda's small demo model. I know old "
                     "dictionaries, fortune cookies, the King James Bible "
                     "and some Python."),
    ("What can you do?", "I can tell you what a word means, tell a joke or "
                         "a quote, read a Bible verse, or show a Python "
                         "function."),
    ("Thanks!", "You are welcome."), ("Thank you.", "You are welcome!"),
    ("How are you?", "I am well, thank you. What would you like to know?"),
]
# The tools a request may carry, as the server writes them (json.dumps with
# separators=(",", ":") is nlohmann::json::dump()'s compact form).
TOOLS = {
    "define": {"name": "define", "description": "Look a word up in a "
               "dictionary", "parameters": {"type": "object", "properties": {
                   "word": {"type": "string"}}, "required": ["word"]}},
    "get_verse": {"name": "get_verse", "description": "Read verses of the "
                  "King James Bible", "parameters": {"type": "object",
                                                     "properties": {
                      "reference": {"type": "string"}},
                      "required": ["reference"]}},
    "fortune": {"name": "fortune", "description": "A random fortune cookie",
                "parameters": {"type": "object", "properties": {}}},
}


def compact(j):
    return json.dumps(j, separators=(",", ":"), ensure_ascii=False)


def tools_system_text(names):
    s = "Tools you can call, one per line:"
    for n in names:
        s += "\n" + compact(TOOLS[n])
    return s + ("\nTo call one, write <tool_call>\n{\"name\": NAME, "
                "\"arguments\": {...}}\n</tool_call>")


def call_text(name, args):
    return "<tool_call>\n" + compact({"name": name, "arguments": args}) + \
        "\n</tool_call>"


def squash(text):
    return re.sub(r"\s+", " ", text).strip()


def cut(text, limit):
    """At most `limit` characters, ending at a sentence end where possible."""
    if len(text) <= limit:
        return text
    t = text[:limit]
    end = max(t.rfind(". "), t.rfind("; "), t.rfind("! "), t.rfind("? "))
    return t[:end + 1] if end > limit // 3 else t.rsplit(" ", 1)[0] + " ..."


def paragraphs(text):
    return [p for p in re.split(r"\n\s*\n", text) if p.strip()]


def lower_first(s):
    return s if len(s) < 2 or s[1].isupper() else s[:1].lower() + s[1:]


def definition(src, doc_id, text):
    """(word, answer) from a dictionary entry, or None.  The answer starts
    "The word X means": the word appears as the question wrote it (the same
    tokens), which a small model copies far more easily than a re-cased
    headword."""
    got = entry(src, doc_id, text)
    if not got:
        return None
    word, body = got
    return word, f"The word {word} means {lower_first(body)}"


def entry(src, doc_id, text):
    """(word, definition text) of a dictionary entry, or None."""
    paras = paragraphs(text)
    if not paras:
        return None
    if src == "devil":
        m = re.match(r"([A-Z][A-Z' .-]*),\s*([a-z. ]+?\.)\s+(.*)", paras[0],
                     re.S)
        if not m:
            return None
        return m.group(1).strip().lower(), squash(m.group(3))
    if src == "jargon":
        word = paras[0].split("\n")[0].strip()
        if len(paras) < 2:
            return None
        head = squash(paras[0].split("\n", 1)[1]) if "\n" in paras[0] else ""
        pos = re.sub(r"^/[^/]*/,?\s*", "", head)
        del pos
        return word, squash(paras[1])
    if src == "gcide":
        word = doc_id.rsplit("/", 1)[0]
        first = paras[0]
        m = re.match(r"([^,(\n]+?)\s*(\([^)]*\))?\s*,\s*((?:[a-z&]+\.\s*)+)",
                     first)
        if not m:
            return None
        head = m.group(1).strip()
        rest = first[m.end():]
        rest = re.sub(r"^\[[^\]]*\]\s*", "", rest, flags=re.S)  # etymology
        rest = re.sub(r"\{([^}]*)\}", r"\1", rest)
        rest = re.sub(r"\s*\[(PJC|RDH|MW10|NetMW)\]", "", rest)
        body = squash(rest)
        if len(body) < 8:
            return None
        del head
        return word, body
    return None


def verse_answer(doc_id, text, rng):
    verses = re.findall(r"^(\d+) (.*)$", text, re.M)
    if not verses:
        return None
    i = rng.randrange(len(verses))
    n = 1 if rng.random() < 0.6 else rng.randint(2, 4)
    chosen = verses[i:i + n]
    if len(chosen) == 1:
        ref = f"{doc_id}:{chosen[0][0]}"
        return ref, chosen[0][1]
    ref = f"{doc_id}:{chosen[0][0]}-{chosen[-1][0]}"
    return ref, "\n".join(f"{v} {t}" for v, t in chosen)


def code_answer(doc_id, text, rng):
    funcs = [m for m in re.finditer(r"^( {0,4})def (\w+)\(.*?(?=^\1\S|\Z)",
                                    text, re.M | re.S)]
    funcs = [m for m in funcs if 60 <= len(m.group(0)) <= 900]
    if not funcs:
        return None
    m = rng.choice(funcs)
    body = m.group(0)
    indent = len(m.group(1))
    body = "\n".join(ln[indent:] for ln in body.rstrip().split("\n"))
    return doc_id[:-3], m.group(2), "```python\n" + body + "\n```"


class Maker:
    def __init__(self, docs, rng):
        self.rng = rng
        self.defs, self.fortunes, self.chapters, self.modules = [], [], [], []
        for d in docs:
            src, text = d["src"], d["text"]
            if src in ("devil", "jargon", "gcide"):
                got = definition(src, d["id"], text)
                if got and len(got[0]) < 40:
                    self.defs.append((got[0], cut(got[1], 500)))
            elif src == "fortune" and len(text) < 500:
                self.fortunes.append(text.strip())
            elif src == "kjv":
                self.chapters.append((d["id"], text))
            elif src == "python":
                self.modules.append((d["id"], text))

    def define(self):
        w, a = self.rng.choice(self.defs)
        return self.rng.choice(DEFINE_QS).format(w=w), a, ("define",
                                                            {"word": w})

    def joke(self):
        return self.rng.choice(JOKE_QS), self.rng.choice(self.fortunes), \
            ("fortune", {})

    def verse(self):
        for _ in range(10):
            cid, text = self.rng.choice(self.chapters)
            got = verse_answer(cid, text, self.rng)
            if got:
                ref, ans = got
                return self.rng.choice(VERSE_QS).format(r=ref), ans, \
                    ("get_verse", {"reference": ref})
        return None

    def code(self):
        if not self.modules:
            return None
        for _ in range(10):
            mid, text = self.rng.choice(self.modules)
            got = code_answer(mid, text, self.rng)
            if got:
                mod, fn, ans = got
                return self.rng.choice(CODE_QS).format(m=mod, f=fn), ans, None
        return None

    def turn(self):
        r = self.rng.random()
        kind = (self.define if r < 0.45 else self.joke if r < 0.65 else
                self.verse if r < 0.85 else self.code)
        got = kind()
        return got or self.define()

    def conversation(self, budget_chars):
        """A list of messages (role, content) of about budget_chars."""
        rng = self.rng
        msgs = []
        tools = rng.random() < 0.15
        if tools:
            names = rng.sample(sorted(TOOLS), rng.randint(1, 3))
            sys = tools_system_text(names)
            if rng.random() < 0.3:
                sys = rng.choice(SYSTEMS) + "\n\n" + sys
            msgs.append({"role": "system", "content": sys})
        elif rng.random() < 0.3:
            msgs.append({"role": "system", "content": rng.choice(SYSTEMS)})
        if rng.random() < 0.1:
            q, a = rng.choice(GREETINGS)
            msgs += [{"role": "user", "content": q},
                     {"role": "assistant", "content": a}]
        used = sum(len(m["content"]) for m in msgs)
        while True:
            q, a, call = self.turn()
            msgs.append({"role": "user", "content": q})
            if tools and call and call[0] in names:
                msgs.append({"role": "assistant",
                             "content": call_text(*call)})
                msgs.append({"role": "tool", "content": "<tool_response>\n" +
                             a + "\n</tool_response>"})
            msgs.append({"role": "assistant", "content": a})
            used += len(q) + len(a)
            if used >= budget_chars:
                return msgs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", default="/work/train-work/corpus")
    ap.add_argument("--out", default="/work/train-work/chat")
    ap.add_argument("--train", type=int, default=30000)
    ap.add_argument("--val", type=int, default=300)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for split, n in (("train", args.train), ("val", args.val)):
        with open(os.path.join(args.corpus, f"{split}.jsonl")) as f:
            docs = [json.loads(line) for line in f]
        rng = random.Random(args.seed + (split == "val"))
        maker = Maker(docs, rng)
        with open(os.path.join(args.out, f"{split}.jsonl"), "w") as f:
            for _ in range(n):
                # Mostly short chats; a quarter fill most of a 2048 context.
                budget = (rng.randint(100, 1200) if rng.random() < 0.75 else
                          rng.randint(2000, 6000))
                f.write(json.dumps({"messages": maker.conversation(budget)},
                                   ensure_ascii=False) + "\n")
        words = sorted({w for w, _ in maker.defs})
        with open(os.path.join(args.out, f"{split}_words.json"), "w") as f:
            json.dump(words, f)
        print(f"{split}: {n} conversations, {len(maker.defs)} definitions, "
              f"{len(maker.fortunes)} fortunes, {len(maker.chapters)} "
              f"chapters, {len(maker.modules)} modules", flush=True)


if __name__ == "__main__":
    main()
