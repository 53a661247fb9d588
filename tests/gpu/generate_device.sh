#!/bin/bash
# On the GPU machine: `cpt generate --device cuda` (greedy, the GPU engine in bf16) on every case of the
# transformers fixture tests/fixtures/generate/generate.json, against the fixture's tokens; with a second build,
# also against that build's output, which must be the same bytes (a refactor that keeps the GPU numerics).
#
#   tests/gpu/generate_device.sh DIR [OLD_DIR]      DIR, OLD_DIR: tests/gpu/device_all.sh build folders
# Prints per case the tokens that agree with the fixture before the first difference (bf16 may part from fp32
# where the fixture's top-2 margin is small; "margin" is printed), and "same as old" / "DIFFERS from old".
# Exit status 1 when a generate call fails, the first token differs from the fixture where its top-2 margin is at
# least 0.05, or the output differs from OLD_DIR's.
set -uo pipefail
cd "$(dirname "$0")/../.."
dir=$1 old=${2:-}
tmp=$(mktemp -d)
python3 - "$dir" "$old" "$tmp" <<'PY'
import json, subprocess, sys, os
d, old, tmp = sys.argv[1], sys.argv[2], sys.argv[3]
fx = json.load(open("tests/fixtures/generate/generate.json"))
n_new = fx["max_new_tokens"]
def gen(build, model, prompt):
    env = dict(os.environ, LD_LIBRARY_PATH=f"{build}/lib:" + os.environ.get("LD_LIBRARY_PATH", ""))
    args = [f"{build}/bin/cpt", "generate", "--device", "cuda", "--model", f"tests/fixtures/model/{model}",
            "--prompt-ids", ",".join(map(str, prompt)), "--greedy", "--max-new-tokens", str(n_new), "--no-eos",
            "--json"]
    r = subprocess.run(args, capture_output=True, text=True, env=env)
    if r.returncode:
        print(f"  {' '.join(args[1:])}: exit {r.returncode}: {r.stderr.strip()[-300:]}")
        return None
    return json.loads(r.stdout.splitlines()[0])
bad = 0
for model, cases in fx["models"].items():
    for i, c in enumerate(cases):
        prompt = c.get("prompt") or c.get("prompt_ids")
        out = gen(d, model, prompt)
        if out is None:
            bad += 1
            continue
        ids, want = out["ids"], c["tokens"]
        agree = next((k for k, (a, b) in enumerate(zip(ids, want)) if a != b), min(len(ids), len(want)))
        line = f"{model} case {i}: {agree}/{len(want)} tokens agree with transformers (first-token margin {(c.get('margin') or [None])[0]})"
        # bf16 against fp32: a first token whose top-2 margin is clear must agree (small margins may flip)
        m0 = (c.get("margin") or [1.0])[0]
        if agree == 0 and m0 >= 0.05:
            bad += 1
        if old:
            o = gen(old, model, prompt)
            same = o is not None and o["ids"] == ids and o.get("logprobs") == out.get("logprobs")
            line += "; same as old" if same else "; DIFFERS from old"
            bad += 0 if same else 1
        print(line)
print("generate_device:", "FAILED" if bad else "ok", f"({bad} bad)")
sys.exit(1 if bad else 0)
PY
rc=$?
rm -rf "$tmp"
exit $rc
