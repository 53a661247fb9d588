#!/usr/bin/env bash
# bench/trl_carry.sh gathers TRL, datasets, dill and multiprocess from the fetched public repositories (bare git dirs
# under CPT_MIRROR, default /work/.mirror) into a folder from which `import dill, multiprocess` works, each package
# with the dist-info that importlib.metadata reads, and whose GRPO import path needs nothing outside the GPU image
# (bench/trl_import_scan.py). Skipped where the repositories were not fetched.
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
MIRROR=${CPT_MIRROR:-/work/.mirror}
cd "$SRC"
for r in huggingface+trl huggingface+datasets uqfoundation+dill uqfoundation+multiprocess; do
  git --git-dir="$MIRROR/$r/repo" rev-parse -q --verify HEAD >/dev/null 2>&1 ||
    { echo "SKIP: $MIRROR/$r/repo not fetched"; exit 77; }
done
command -v python3 >/dev/null || { echo "SKIP: python3 not found"; exit 77; }
T=$(mktemp -d /tmp/cpt-trl-carry-XXXXXX)
trap 'rm -rf "$T"' EXIT
bash bench/trl_carry.sh "$T/carry" > "$T/log" 2>&1 || { cat "$T/log"; exit 1; }
grep -q "0 third-party modules not on the device image" "$T/log" || { cat "$T/log"; exit 1; }
PYTHONPATH="$T/carry" python3 - <<'PY'
import importlib.metadata as m
import dill, multiprocess
want = {"trl": "1.9.0", "datasets": "5.0.1", "dill": "0.4.1", "multiprocess": "0.70.19"}
got = {k: m.version(k) for k in want}
assert got == want, got
assert dill.__version__ == "0.4.1" and multiprocess.__version__ == "0.70.19"
with multiprocess.Pool(2) as p:  # dill pickles the lambda
    assert p.map(lambda x: x * x, [1, 2, 3]) == [1, 4, 9]
print("test_trl_carry:", got)
PY
size=$(du -sm "$T/carry" | cut -f1)
[ "$size" -lt 32 ] || { echo "FAIL: the carry is ${size} MB" >&2; exit 1; }
echo "test_trl_carry: ok (${size} MB)"
