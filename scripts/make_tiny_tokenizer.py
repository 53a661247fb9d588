#!/usr/bin/env python3
"""Writes examples/tiny-tokenizer/{tokenizer.json,tokenizer_config.json}: a real Hugging Face byte-level BPE
tokenizer for the tiny example models (vocab <= 1024, so an embedding table stays small enough to train in
minutes on two CPU cores).

The pipeline is Qwen2/Qwen3's: NFC normalizer, the Qwen Split regex, ByteLevel (no prefix space), BPE merges by
rank, ByteLevel decoder. Ids 0..255 are the 256 byte tokens (in GPT-2's byte-to-unicode order), then the merges
learned here by plain BPE on a small deterministic text of arithmetic and countdown prompts and answers, then the
special tokens <|endoftext|>, <|im_start|>, <|im_end|>. The chat template is plain ChatML.

Standard library only; deterministic (fixed seed, ties broken by the pair itself). Run from anywhere:
    python3 scripts/make_tiny_tokenizer.py [OUT_DIR]
"""
import collections
import json
import os
import random
import re
import sys

MAX_VOCAB = 1024
MAX_MERGES = 640
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

# The Qwen2/Qwen3 pre-tokenizer regex, written into tokenizer.json exactly as Qwen's file has it.
QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
              r"\s*[\r\n]+|\s+(?!\S)|\s+")
# The same regex for ASCII text in Python's re (which lacks \p{..}); the training text is checked to be ASCII.
ASCII_SPLIT = re.compile(r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\nA-Za-z0-9]?[A-Za-z]+|[0-9]| ?[^\sA-Za-z0-9]+[\r\n]*|"
                         r"\s*[\r\n]+|\s+(?!\S)|\s+")

CHATML_TEMPLATE = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
                   "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
                   "{% endif %}")


def bytes_to_unicode():
    """GPT-2's reversible map from bytes to printable unicode characters."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
        list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [(b, chr(c)) for b, c in zip(bs, cs)]


GENERAL_ENGLISH = [
    "You are a helpful assistant.", "Solve the problem and put the final answer in \\boxed{}.",
    "The answer is correct.", "The answer is wrong, please try again.", "Hello! How can I help you today?",
    "First, add the two numbers together. Then subtract the smaller number from the larger one.",
    "Multiply the result by three and divide it by two to get the final value.",
    "Each number must be used exactly once, and only integer division is allowed.",
    "If the equation does not reach the target, we should check our steps carefully.",
    "The sum of these numbers is even, so the difference between them is also even.",
    "Write the equation in one line, without any explanation after the final answer.",
    "There are many possible solutions, but this one uses every number and the right operations.",
    "Sure, here is a short summary of the problem and a clear solution.",
    "Thank you for the question. Let me explain how to solve it in a few simple steps.",
    "Remember to keep the order of operations: multiplication and division come before addition.",
    "The user asked for a number between one and one hundred, and the model should answer with it.",
]


def training_text(seed=0):
    """Arithmetic and countdown prompts with worked answers, in the fixed English the examples use."""
    rng = random.Random(seed)
    ops = [("+", "plus", lambda a, b: a + b), ("-", "minus", lambda a, b: a - b),
           ("*", "times", lambda a, b: a * b)]
    lines = []
    for _ in range(400):
        a, b = rng.randint(0, 99), rng.randint(1, 99)
        sym, word, fn = rng.choice(ops)
        r = fn(a, b)
        lines.append(rng.choice([
            f"What is {a} {sym} {b}?",
            f"Compute {a} {sym} {b}.",
            f"Calculate {a} {word} {b}. Give the final answer after ####.",
            f"Question: What is {a} {sym} {b}? Answer with a number.",
        ]))
        lines.append(rng.choice([
            f"{a} {sym} {b} = {r}. The answer is {r}.",
            f"Let's think step by step. {a} {sym} {b} = {r}.\n#### {r}",
            f"We have {a} {sym} {b} = {r}, so the answer is \\boxed{{{r}}}.",
            f"The result of {a} {word} {b} is {r}.\nAnswer: {r}",
        ]))
    for _ in range(200):
        nums = [rng.randint(1, 25) for _ in range(rng.randint(3, 4))]
        target = rng.randint(10, 100)
        lines.append(f"Using the numbers {nums}, create an equation that equals {target}. You can use basic "
                     f"arithmetic operations (+, -, *, /) and each number can only be used once. Show your work "
                     f"in <think> </think> tags and return the final equation in <answer> </answer> tags, "
                     f"for example <answer> (1 + 2) / 3 </answer>.")
        a, b, c = nums[0], nums[1], nums[2]
        lines.append(f"<think> Let me try {a} + {b} = {a + b}, then {a + b} * {c} = {(a + b) * c}. That is not "
                     f"{target}, so I will try another order. </think> <answer> ({a} + {b}) * {c} </answer>")
    lines += GENERAL_ENGLISH * 2
    text = "\n".join(lines) + "\n"
    assert text.isascii()
    return text


def learn_merges(text, max_merges):
    b2u = dict(bytes_to_unicode())
    words = collections.Counter(ASCII_SPLIT.findall(text))
    seqs = {w: [b2u[b] for b in w.encode("utf-8")] for w in words}
    merges = []
    while len(merges) < max_merges:
        pairs = collections.Counter()
        for w, n in words.items():
            s = seqs[w]
            for i in range(len(s) - 1):
                pairs[(s[i], s[i + 1])] += n
        if not pairs:
            break
        best = min(pairs.items(), key=lambda kv: (-kv[1], kv[0]))
        if best[1] < 2:
            break
        a, b = best[0]
        merges.append((a, b))
        for w in words:
            s = seqs[w]
            out, i = [], 0
            while i < len(s):
                if i + 1 < len(s) and s[i] == a and s[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            seqs[w] = out
    return merges


def build(out_dir):
    byte_tokens = [u for _, u in bytes_to_unicode()]
    merges = learn_merges(training_text(), min(MAX_MERGES, MAX_VOCAB - 256 - len(SPECIALS)))
    vocab = {}
    for u in byte_tokens:
        vocab[u] = len(vocab)
    for a, b in merges:
        assert a + b not in vocab, (a, b)
        vocab[a + b] = len(vocab)
    added = []
    for s in SPECIALS:
        added.append({"id": len(vocab) + len(added), "content": s, "single_word": False, "lstrip": False,
                      "rstrip": False, "normalized": False, "special": True})
    assert len(vocab) + len(added) <= MAX_VOCAB
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN_SPLIT}, "behavior": "Isolated", "invert": False},
            dict(byte_level)]},
        "post_processor": dict(byte_level),
        "decoder": dict(byte_level),
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": [[a, b] for a, b in merges]},
    }
    config = {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": {str(t["id"]): {k: t[k] for k in ("content", "lstrip", "normalized", "rstrip",
                                                                  "single_word", "special")} for t in added},
        "bos_token": None,
        "chat_template": CHATML_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 4096,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": None,
    }
    os.makedirs(out_dir, exist_ok=True)
    for name, obj in (("tokenizer.json", tokenizer), ("tokenizer_config.json", config)):
        tmp = os.path.join(out_dir, name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(obj, f, ensure_ascii=False, indent=2)
            f.write("\n")
        os.replace(tmp, os.path.join(out_dir, name))
    print(f"{out_dir}: {len(vocab) + len(added)} tokens ({len(merges)} merges)")


if __name__ == "__main__":
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    build(sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "examples", "tiny-tokenizer"))
