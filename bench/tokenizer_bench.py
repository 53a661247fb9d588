#!/usr/bin/env python3
"""HF `tokenizers` side of the tokenizer benchmark (bench/tokenizer_bench.sh runs both sides in one go).

Encodes the parity corpus repeated to --mb megabytes, as one document per corpus line, and prints one line:
  hf threads=N mode=encode_batch bytes=B docs=D ids=I checksum=C seconds=S mb_s=R
The thread count is fixed by RAYON_NUM_THREADS, which must be set before `tokenizers` is imported (the sh does it).
The checksum (sum of ids mod 2^32) must equal the C side's, so both sides did the same work.
"""
import argparse
import json
import os
import time


def load_docs(corpus, mb):
    with open(corpus, encoding="utf-8") as f:
        base = [json.loads(line)["text"] for line in f]
    base = [t for t in base if t]
    docs, size, target = [], 0, int(mb * 1e6)
    while size < target:
        for t in base:
            docs.append(t)
            size += len(t.encode("utf-8"))
            if size >= target:
                break
    return docs, size


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--mb", type=float, default=20)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    threads = int(os.environ.get("RAYON_NUM_THREADS", "0"))
    from tokenizers import Tokenizer  # after RAYON_NUM_THREADS is set

    tok = Tokenizer.from_file(args.tokenizer)
    docs, size = load_docs(args.corpus, args.mb)
    modes = ["encode", "encode_batch"] if threads == 1 else ["encode_batch"]
    for mode in modes:
        best = None
        for _ in range(args.reps):
            t0 = time.perf_counter()
            if mode == "encode":
                encs = [tok.encode(d, add_special_tokens=False) for d in docs]
            else:
                encs = tok.encode_batch(docs, add_special_tokens=False)
            dt = time.perf_counter() - t0
            best = dt if best is None else min(best, dt)
        n_ids = sum(len(e.ids) for e in encs)
        checksum = sum(sum(e.ids) for e in encs) % (1 << 32)
        print(f"hf threads={threads} mode={mode} bytes={size} docs={len(docs)} ids={n_ids} checksum={checksum} "
              f"seconds={best:.3f} mb_s={size / best / 1e6:.2f}", flush=True)

if __name__ == "__main__":
    main()
