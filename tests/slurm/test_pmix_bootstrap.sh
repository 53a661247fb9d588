#!/usr/bin/env bash
# The rank bootstrap on a real single-node Slurm with PMIx: 2 and 4 ranks under `srun --mpi=pmix` agree on rank
# 0's blob; outside srun the pmix transport fails with a clear message; the file transport works without Slurm.
set -euo pipefail
bin=${CPT_BUILD:?}/cpt
dir=$(mktemp -d /tmp/cpt-slurm-XXXXXX)
trap 'tests/slurm/cluster.sh stop "$dir"; rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

tests/slurm/cluster.sh start "$dir"
source "$dir/env"

for n in 2 4; do
  out=$(srun --mpi=pmix -n "$n" --overlap "$bin" check-bootstrap --kind pmix)
  echo "$out"
  [ "$(echo "$out" | wc -l)" -eq "$n" ] || fail "$n ranks: expected $n lines"
  [ "$(echo "$out" | awk '{print $5}' | sort -u | wc -l)" -eq 1 ] || fail "$n ranks disagree on the blob"
  [ "$(echo "$out" | awk '{print $2}' | sort -u | wc -l)" -eq "$n" ] || fail "ranks not distinct"
  echo "$out" | grep -q "^rank 0/$n transport pmix" || fail "no rank 0 of $n"
  [ "$(echo "$out" | awk '{print $5}' | head -1)" != "0000000000000000" ] || fail "blob never written"
done

# The CPU collective (Open MPI from the plugin) under direct launch: Open MPI's own PMIx client meets Slurm's pmix
# plugin (MpiDefault=none, so --mpi=pmix is what makes it work): sums, broadcast and averaged gradients on every rank.
if command -v mpirun >/dev/null && [ -f "$CPT_BUILD/libcpt-coll-mpi.so" ]; then
  out=$(OMP_NUM_THREADS=1 srun --mpi=pmix -n 2 --overlap "$bin" check-collective) || fail "check-collective under srun: $out"
  echo "$out"
  [ "$(echo "$out" | grep -c "^rank [01]/2 backend mpi sum1 3 (want 3) sum1e6 maxerr 0 bcast ok .*: ok$")" -eq 2 ] ||
    fail "srun --mpi=pmix -n 2 check-collective: not both ranks ok"
  # without PMIx the ranks cannot meet, and say so instead of running as two groups of one
  if err=$(srun --mpi=none -n 2 --overlap "$bin" check-collective 2>&1); then fail "--mpi=none ran: $err"; fi
  echo "$err" | grep -q "has no PMIx: start it with .srun --mpi=pmix." || fail "unclear error under --mpi=none: $err"
else
  echo "no Open MPI plugin in this build: the srun collective part is not run"
fi

# Outside srun: the pmix transport says what to do.
if err=$("$bin" check-bootstrap --kind pmix 2>&1); then fail "pmix outside srun should fail"; fi
echo "$err" | grep -q "srun --mpi=pmix" || fail "unclear error outside srun: $err"

# The file transport with three local processes.
share="$dir/share"
for r in 0 1 2; do CPT_RANK=$r CPT_WORLD_SIZE=3 "$bin" check-bootstrap --kind file --dir "$share" > "$dir/out.$r" & done
wait
cat "$dir"/out.*
[ "$(cat "$dir"/out.* | awk '{print $5}' | sort -u | wc -l)" -eq 1 ] || fail "file transport ranks disagree"
[ "$(cat "$dir"/out.* | wc -l)" -eq 3 ] || fail "file transport: expected 3 lines"
echo "pmix bootstrap: ok"
