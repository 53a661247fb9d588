#!/usr/bin/env bash
# Gathers the pure-Python sources of TRL and the packages it needs that the GPU image lacks (datasets, dill,
# multiprocess) into DIR (default .carry-trl, git-ignored), from the public repositories that the session's `fetch`
# tool stored as bare git dirs under /work/.mirror. Nothing here is committed; the folder travels to the device as
# a carried path and is used with PYTHONPATH=DIR (see bench/trl_grpo.py).
#   bash bench/trl_carry.sh [DIR]
# Versions: TRL v1.9.0 (transformers>=4.56.2, datasets>=4.7.0), datasets 5.0.1 (dill<0.4.2, multiprocess<0.70.20),
# dill 0.4.1, multiprocess 0.70.19 (its py3.12 folder: the device runs Python 3.12).
# Each package gets a minimal NAME-VERSION.dist-info so importlib.metadata (which transformers and TRL ask for
# versions and availability) finds it.
set -euo pipefail
DIR=${1:-.carry-trl}
MIRROR=${CPT_MIRROR:-/work/.mirror}
TRL_REF=${TRL_REF:-v1.9.0}
DATASETS_REF=${DATASETS_REF:-5.0.1}
DILL_REF=${DILL_REF:-0.4.1}
MP_REF=${MP_REF:-0.70.19}
MP_PY=${MP_PY:-py3.12}

need() { # need OWNER+NAME: the bare git dir of a fetched repository
    local g="$MIRROR/$1/repo"
    git --git-dir="$g" rev-parse --verify -q HEAD >/dev/null ||
        { echo "trl_carry: $g is not a fetched repository (fetch github:${1/+//} first)" >&2; exit 1; }
    echo "$g"
}
# take GITDIR REF PATH STRIP: extracts PATH of REF into $DIR, dropping STRIP leading path components
take() {
    git --git-dir="$1" rev-parse --verify -q "$2^{commit}" >/dev/null ||
        { echo "trl_carry: $1 has no ref $2" >&2; exit 1; }
    # a mirror may lack large blobs outside PATH; git archive names them on stderr but still writes PATH
    git --git-dir="$1" archive "$2" "$3" 2> >(grep -v '^error: invalid object' >&2) |
        tar x -C "$DIR" --strip-components="$4"
}
# distinfo NAME VERSION TOPLEVEL
distinfo() {
    local d="$DIR/$1-$2.dist-info"
    mkdir -p "$d"
    printf 'Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: carried source (bench/trl_carry.sh)\n' "$1" "$2" >"$d/METADATA"
    printf '%s\n' "$3" >"$d/top_level.txt"
    printf 'trl_carry\n' >"$d/INSTALLER"
}

TRL=$(need huggingface+trl)
DS=$(need huggingface+datasets)
DILL=$(need uqfoundation+dill)
MP=$(need uqfoundation+multiprocess)

rm -rf "$DIR"
mkdir -p "$DIR"
take "$TRL" "$TRL_REF" trl 0
take "$DS" "$DATASETS_REF" src/datasets 1
take "$DILL" "$DILL_REF" dill 0
take "$MP" "$MP_REF" "$MP_PY/multiprocess" 1
take "$MP" "$MP_REF" "$MP_PY/_multiprocess" 1
# tests are not needed at run time
rm -rf "$DIR/dill/tests" "$DIR/multiprocess/tests"

# dill and multiprocess read their version from a generated __info__.py (setup.py writes it on install)
v() { echo "${1#v}"; }
for p in dill:"$DILL_REF" multiprocess:"$MP_REF"; do
    name=${p%%:*} ver=$(v "${p#*:}")
    printf '__version__ = %s\n__author__ = %s\n__doc__ = %s\n__license__ = %s\n' \
        "'$ver'" "'Mike McKerns'" "'$name (carried source)'" "'BSD-3-Clause'" >"$DIR/$name/__info__.py"
done
distinfo trl "$(v "$TRL_REF")" trl
distinfo datasets "$(v "$DATASETS_REF")" datasets
distinfo dill "$(v "$DILL_REF")" dill
distinfo multiprocess "$(v "$MP_REF")" "multiprocess
_multiprocess"
# what can be checked without torch: the two multiprocessing packages import, and nothing that trl, its GRPO trainer
# or datasets import unconditionally is missing from the GPU image
if command -v python3 >/dev/null; then
    PYTHONPATH="$DIR" python3 -c 'import dill, multiprocess' ||
        { echo "trl_carry: import dill, multiprocess failed from $DIR" >&2; exit 1; }
    python3 "$(dirname "$0")/trl_import_scan.py" "$DIR"
fi
find "$DIR" -name '__pycache__' -prune -exec rm -rf {} +
echo "trl_carry: $DIR: $(du -sh "$DIR" | cut -f1), trl $TRL_REF, datasets $DATASETS_REF, dill $DILL_REF, multiprocess $MP_REF ($MP_PY)"
