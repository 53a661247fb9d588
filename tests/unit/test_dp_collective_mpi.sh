#!/usr/bin/env bash
# The CPU collective of data parallel through the real library: `mpirun -n 2 cpt check-collective` (Open MPI,
# loaded from the plugin libcpt-coll-mpi.so) sums 1 and 1e6 floats exactly, broadcasts a header and a payload, and
# averages a tiny model's gradients (allreduce_model_grads and finish) to the average each rank computes by hand.
# One rank needs no plugin; two ranks without it fail naming it; a rank that dies, or fails and calls cpt_dp_abort,
# ends the job, no hang.
set -euo pipefail
bin=${CPT_BUILD:?}/cpt
command -v mpirun >/dev/null || { echo "SKIP: mpirun not found (apt-get install openmpi-bin)"; exit 77; }
[ -f "$CPT_BUILD/libcpt-coll-mpi.so" ] || { echo "SKIP: $CPT_BUILD/libcpt-coll-mpi.so not built (no MPI found by cmake)"; exit 77; }
[ "$(id -u)" -ne 0 ] || export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_NUM_THREADS=1
# Sanitizer builds: Open MPI's own never-freed state is suppressed (openmpi.lsan.supp), cpt's is still checked; the
# slow unwinder sees through its frames (built without frame pointers), and its components stay loaded to be named.
export LSAN_OPTIONS="suppressions=${CPT_SRC:-$PWD}/tests/unit/openmpi.lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0"
export OMPI_MCA_mca_base_component_disable_dlclose=1 PMIX_MCA_mca_base_component_disable_dlclose=1
dir=$(mktemp -d /tmp/cpt-coll-XXXXXX)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
mpi=(mpirun --oversubscribe --bind-to none)

for n in 2 3; do
  out=$("${mpi[@]}" -n $n "$bin" check-collective) || fail "$n ranks: check-collective failed: $out"
  echo "$out"
  [ "$(echo "$out" | grep -c ': ok$')" -eq $n ] || fail "$n ranks: not every rank ok"
  want=$((n * (n + 1) / 2))
  [ "$(echo "$out" | grep -c "^rank [0-$((n - 1))]/$n backend mpi sum1 $want (want $want) sum1e6 maxerr 0 bcast ok.* zero ok: ok$")" -eq $n ] ||
    fail "$n ranks: sums or broadcast wrong"
  # the ranks' own gradients differed from the average (not vacuous), and the averaged ones match it
  echo "$out" | awk '{ if ($16 + 0 < 0.1 || $18 + 0 > 1e-6 || $20 + 0 > 1e-6) exit 1 }' || fail "$n ranks: gradients"
done

# One rank, no launcher: no library at all (a copy of cpt without the plugin beside it).
cp "$bin" "$dir/cpt"
out=$(CPT_BIN= "$dir/cpt" check-collective) || fail "one rank without the plugin: $out"
echo "$out" | grep -q "^rank 0/1 backend none .*: ok$" || fail "one rank: $out"

# Two ranks without the plugin: the error names it.
if err=$(CPT_BIN= "${mpi[@]}" -n 2 "$dir/cpt" check-collective 2>&1); then fail "two ranks without the plugin ran"; fi
echo "$err" | grep -q "libcpt-coll-mpi.so, which is absent" || fail "unclear error without the plugin: $err"

# MPI's view disagreeing with the launcher's variables is an error, not a silent regrouping.
if err=$(CPT_WORLD_SIZE=3 "${mpi[@]}" -n 2 -x CPT_WORLD_SIZE "$bin" check-collective 2>&1); then fail "size mismatch accepted"; fi
echo "$err" | grep -q "CPT_WORLD_SIZE=3" || fail "unclear size mismatch: $err"

# A rank killed before the collectives: mpirun ends the job (the other rank is not left waiting).
start=$(date +%s)
rc=0
timeout 60 "${mpi[@]}" -n 2 sh -c \
  'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then kill -9 $$; fi; exec "$0" check-collective' "$bin" > "$dir/dead.log" 2>&1 || rc=$?
took=$(( $(date +%s) - start ))
# mpirun's own status for a rank killed by SIGKILL (124 would be the timeout's)
[ "$rc" -eq 137 ] || { cat "$dir/dead.log"; fail "a dead rank: mpirun exited $rc, want 137"; }
[ "$took" -lt 50 ] || fail "a dead rank took ${took}s to end the job"
# (which of its two messages mpirun prints depends on which it notices first)
grep -E -q "exited on signal 9|the job has been aborted" "$dir/dead.log" || { cat "$dir/dead.log"; fail "mpirun did not report the dead rank"; }
# A rank that fails while the other waits in a collective ends the job through cpt_dp_abort (finalising would wait
# for the waiting rank forever: the run without it hung until killed).
start=$(date +%s)
rc=0
timeout 60 "${mpi[@]}" -n 2 "$bin" check-collective --fail-rank 1 > "$dir/fail.log" 2>&1 || rc=$?
failed_in=$(( $(date +%s) - start ))
[ "$rc" -eq 1 ] || { cat "$dir/fail.log"; fail "a failing rank: mpirun exited $rc, want 1 (124: the job hung)"; }
grep -q "dp rank 1/2: ending every rank (MPI_Abort, status 1): rank 1: failing on purpose" "$dir/fail.log" ||
  { cat "$dir/fail.log"; fail "the failing rank did not say why it ended the job"; }
echo "dp collective over mpi: ok (dead rank ended the job in ${took}s, a failing rank in ${failed_in}s)"
