#!/usr/bin/env bash
# `cpt local-ranks N -- PROGRAM`, the local launcher of GPU trainer ranks (scheduler/local_ranks.h), with shell ranks:
# each rank gets CPT_RANK / CPT_WORLD_SIZE / CPT_LOCAL_RANK; --clear empties the bootstrap folder; a stop signal
# reaches every rank and their status comes back; a failing rank ends the others; kill -9 of the launcher leaves
# no rank behind.
set -euo pipefail
bin=${CPT_BUILD:?}/cpt
dir=$(mktemp -d /tmp/cpt-ranks-XXXXXX)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

mkdir -p "$dir/boot" && echo stale > "$dir/boot/cpt-dp-uid.blob"
out=$("$bin" local-ranks 3 --clear "$dir/boot" -- sh -c 'echo "$CPT_RANK $CPT_WORLD_SIZE $CPT_LOCAL_RANK"; ls "$0"' "$dir/boot")
[ "$(echo "$out" | sort)" = "$(printf '0 3 0\n1 3 1\n2 3 2')" ] || fail "rank variables: $out"
[ ! -e "$dir/boot/cpt-dp-uid.blob" ] || fail "--clear left the stale blob"

# USR1 reaches every rank; each exits 3 (a stop after a checkpoint) and so does the group
cat > "$dir/rank.sh" <<'SH'
trap 'echo "rank $CPT_RANK stopped" >> "$0.log"; exit 3' USR1
touch "$0.up.$CPT_RANK"
for _ in $(seq 600); do sleep 0.1; done
SH
"$bin" local-ranks 2 -- bash "$dir/rank.sh" & pid=$!
for _ in $(seq 100); do [ -e "$dir/rank.sh.up.1" ] && [ -e "$dir/rank.sh.up.0" ] && break; sleep 0.05; done
kill -USR1 $pid
rc=0; wait $pid || rc=$?
[ "$rc" -eq 3 ] || fail "stop: status $rc, want 3"
[ "$(sort "$dir/rank.sh.log" | tr '\n' ,)" = "rank 0 stopped,rank 1 stopped," ] || fail "stop did not reach both ranks"

# a failing rank: the others are ended and its status comes back, quickly
start=$(date +%s)
rc=0; "$bin" local-ranks 3 -- bash -c '[ "$CPT_RANK" = 1 ] && exit 5; exec sleep 60' 2> "$dir/fail.log" || rc=$?
[ "$rc" -eq 5 ] || fail "a failing rank: status $rc, want 5"
[ $(( $(date +%s) - start )) -lt 20 ] || fail "the other ranks were not ended"
grep -q "rank 1 exited with status 5; stopping the other ranks" "$dir/fail.log" || fail "no message about rank 1"

# kill -9 of the launcher: the ranks die with it
echo 'for _ in $(seq 600); do sleep 0.1; done' > "$dir/sleeper.sh"
"$bin" local-ranks 2 -- bash "$dir/sleeper.sh" & pid=$!
for _ in $(seq 100); do [ "$(pgrep -f "bash $dir/sleeper.sh" | wc -l)" -ge 2 ] && break; sleep 0.05; done
[ "$(pgrep -f "bash $dir/sleeper.sh" | wc -l)" -ge 2 ] || fail "ranks never started"
kill -9 $pid
for _ in $(seq 40); do pgrep -f "bash $dir/sleeper.sh" > /dev/null || break; sleep 0.05; done
if pgrep -f "bash $dir/sleeper.sh" > /dev/null; then fail "ranks outlived the launcher"; fi
echo "local-ranks: ok"
