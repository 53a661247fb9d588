#!/usr/bin/env python3
"""Preference pairs for DPO from the synthetic arithmetic task (stdlib only, deterministic).

    python3 scripts/make_pref_data.py --split train --n 2000 --seed 1 > examples/data/arithmetic_pref_train.jsonl
    python3 scripts/make_pref_data.py --split eval  --n 200  --seed 2 > examples/data/arithmetic_pref_eval.jsonl

Questions follow core/synth.c's distribution ("What is 47 + 38?": a + b and a - b with operands 1..99, b <= a for
minus, a * b with a in 2..20 and b in 2..9). chosen is the correct reply in the SFT format ("47 + 38 = 85\\n#### 85").
rejected is a wrong reply of one of three kinds, in equal shares:
  wrong       the whole reply with a wrong result w = answer + d, d in +-1..10 ("47 + 38 = 88\\n#### 88")
  mismatch    the right equation but a different final answer ("47 + 38 = 85\\n#### 88")
  no_answer   the right equation without the "#### answer" line ("47 + 38 = 85")
Train and eval questions never overlap: a question belongs to eval when a hash of its text is 0 mod 8.
"""
import argparse
import hashlib
import json
import random
import sys


def question(rng):
    k = rng.randrange(3)
    if k == 0:
        a, b = 1 + rng.randrange(99), 1 + rng.randrange(99)
        return a, "+", b, a + b
    if k == 1:
        a = 1 + rng.randrange(99)
        b = 1 + rng.randrange(a)
        return a, "-", b, a - b
    a, b = 2 + rng.randrange(19), 2 + rng.randrange(8)
    return a, "*", b, a * b


def is_eval(text):
    return int(hashlib.sha256(text.encode()).hexdigest(), 16) % 8 == 0


def wrong_value(rng, c):
    d = rng.choice([x for x in range(-10, 11) if x != 0])
    w = c + d
    return w if w >= 0 else c - d


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--split", choices=["train", "eval"], required=True)
    ap.add_argument("--n", type=int, required=True)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    if args.n < 1:
        ap.error("--n must be >= 1")
    rng = random.Random(args.seed)
    seen = set()
    out = []
    tries = 0
    while len(out) < args.n:
        tries += 1
        if tries > 100 * args.n + 100000:
            sys.exit("make_pref_data: not enough distinct questions for --n %d" % args.n)
        a, op, b, c = question(rng)
        expr = "%d %s %d" % (a, op, b)
        prompt = "What is %s?" % expr
        if prompt in seen or is_eval(prompt) != (args.split == "eval"):
            continue
        seen.add(prompt)
        chosen = "%s = %d\n#### %d" % (expr, c, c)
        kind = len(out) % 3
        w = wrong_value(rng, c)
        if kind == 0:
            rejected = "%s = %d\n#### %d" % (expr, w, w)
        elif kind == 1:
            rejected = "%s = %d\n#### %d" % (expr, c, w)
        else:
            rejected = "%s = %d" % (expr, c)
        out.append({"prompt": prompt, "chosen": chosen, "rejected": rejected, "answer": str(c)})
    for r in out:
        sys.stdout.write(json.dumps(r, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
