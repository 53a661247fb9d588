#!/usr/bin/env python3
"""Checks that data splits share no question: every file is given with its split name, and a question (the prompt
of an rl/prompt record, the first user turn of a messages record) found in files of two different splits fails the
check.

    scripts/check_splits.py sft=FILE... rl=FILE... eval=FILE...

Without arguments it checks the committed examples (examples/data: arithmetic_train.jsonl is SFT data,
arithmetic_rl_train.jsonl and arithmetic1_rl_train.jsonl RL prompts, arithmetic_eval.jsonl, arithmetic_rl_eval.jsonl
and arithmetic1_rl_eval.jsonl evaluation questions; multiply2_rl_train.jsonl and multiply2_rl_eval.jsonl, the
tool-learning run's); tests/e2e/test_data_splits.sh also checks the example models' SFT data
(scripts/make_example_model.sh --data-only, and MODEL=tiny-tool-sft's tool-sft transcripts). Prints each split's size and the overlaps; exits 1 on any shared question, 2 on bad input."""
import json
import os
import sys

EXAMPLES = ["sft=examples/data/arithmetic_train.jsonl", "rl=examples/data/arithmetic_rl_train.jsonl",
            "rl=examples/data/arithmetic1_rl_train.jsonl", "eval=examples/data/arithmetic_eval.jsonl",
            "eval=examples/data/arithmetic_rl_eval.jsonl", "eval=examples/data/arithmetic1_rl_eval.jsonl",
            "rl=examples/data/multiply2_rl_train.jsonl", "eval=examples/data/multiply2_rl_eval.jsonl"]


def question(rec, where):
    if isinstance(rec.get("prompt"), str):
        return rec["prompt"]
    for m in rec.get("messages") or []:
        if m.get("role") == "user":
            return m.get("content")
    raise ValueError(f"{where}: no prompt and no user message")


def main(argv):
    args = argv or EXAMPLES
    if not argv:
        os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    splits = {}  # split -> {question: first file:line}
    for a in args:
        name, sep, path = a.partition("=")
        if not sep or not name or not path:
            print(f"check_splits: expected SPLIT=FILE, got '{a}'", file=sys.stderr)
            return 2
        qs = splits.setdefault(name, {})
        try:
            with open(path, encoding="utf-8") as f:
                for i, line in enumerate(f, 1):
                    if line.strip():
                        qs.setdefault(question(json.loads(line), f"{path}:{i}"), f"{path}:{i}")
        except (OSError, ValueError) as e:
            print(f"check_splits: {e}", file=sys.stderr)
            return 2
    bad = 0
    names = sorted(splits)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            shared = splits[a].keys() & splits[b].keys()
            print(f"{a} ({len(splits[a])} questions) and {b} ({len(splits[b])}): {len(shared)} shared")
            for q in sorted(shared)[:5]:
                print(f"  '{q}' in {splits[a][q]} and {splits[b][q]}")
            bad += len(shared)
    print("check_splits: ok" if not bad else f"check_splits: FAIL, {bad} questions in two splits")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
