#!/usr/bin/env bash
# Satellites over TLS: with queue.tls_cert / queue.tls_key / queue.tls_ca (a CA and a certificate naming this node,
# made here with openssl), cpt-sched's redis-server speaks only TLS on its satellite port; the satellite job gets a
# rediss:// URL, verifies the server with the CA, authenticates with the password and makes groups. A plain client
# gets nothing from the port; a TLS client without the password gets NOAUTH. The job is cancelled at the end (the
# exactly-once checks of a whole satellite run are test_scale_satellite.sh's).
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
source tests/e2e/grpo_small.sh
source tests/slurm/lib.sh
make_tiny_model "$T" || fail "tiny model"
host=$(hostname)
C="$T/tls"
mkdir -p "$C"
(cd "$C" &&
 openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ca.key -out ca.crt -days 2 \
   -subj "/CN=cpt test CA" &&
 openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout node.key -out node.csr \
   -subj "/CN=$host" &&
 printf 'subjectAltName=DNS:%s,DNS:localhost,IP:127.0.0.1\n' "$host" > ext &&
 openssl x509 -req -in node.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out node.crt -days 2 -extfile ext &&
 chmod 600 node.key) > "$T/openssl.log" 2>&1 || { cat "$T/openssl.log"; fail "openssl"; }
R="$T/job"
RUN=grpo-arithmetic
job=$(sbatch --parsable --gres=none --ntasks=3 --cpus-per-task=1 --output="$T/job.log" sbatch/grpo_4gpu.sh \
      "${GRPO_ARGS[@]}" roles.rollout=1 roles.reward=1 slurm.trainer_gpus=0 slurm.rollout_gpus=0 \
      slurm.trainer_cpus=1 slurm.rollout_cpus=1 slurm.reward_cpus=1 slurm.satellite_check_s=2 roles.drain_grace_s=30 \
      queue.tls_cert="$C/node.crt" queue.tls_key="$C/node.key" queue.tls_ca="$C/ca.crt" \
      train.steps=400 train.groups_per_step=4 run.dir="$R")
wait_run_step "$R" 2 300
line=$(grep 'for satellite jobs' "$T/job.log" | head -1)
echo "$line" | grep -q "rediss://$host:" || fail "the satellite URL is not rediss://$host:PORT: $line"
port=$(echo "$line" | grep -o 'rediss://[^ ]*' | sed 's/.*://')
plain=$(timeout 5 redis-cli -h 127.0.0.1 -p "$port" PING 2>&1 || true)
echo "$plain" | grep -Eq 'PONG|NOAUTH' && fail "the port answered a plain client: $plain"
tls=$(timeout 5 redis-cli --tls --cacert "$C/ca.crt" -h 127.0.0.1 -p "$port" PING 2>&1 || true)
echo "$tls" | grep -q NOAUTH || fail "a TLS client without the password: $tls"

"$BUILD/cpt-scale" --run "$R" rollout=2 | grep -q "desired: rollout=2" || fail "cpt-scale rollout=2"
for _ in $(seq 1 120); do
  "$BUILD/cpt-queue" stats --run "$R" > "$T/stats" 2>&1 || true
  grep -q "prompts .* rollout-sat0" "$T/stats" && break; sleep 0.5
done
grep -q "prompts .* rollout-sat0" "$T/stats" || { cat "$T/stats"; fail "rollout-sat0 is not a consumer of the prompts"; }
up=$(run_step "$R")
wait_run_step "$R" $((up + 4)) 300
grep -q "not trusted\|TLS handshake failed" "$R/logs/rollout-sat0.log" && fail "TLS errors in the satellite's log"
scancel "$job"
wait_job_done_any() { for _ in $(seq 1 120); do [ -z "$(squeue -h -o %i)" ] && return 0; sleep 0.5; done; return 1; }
wait_job_done_any || fail "jobs left after scancel"
made=$(grep -o 'stopping: [0-9]* groups' "$R/logs/rollout-sat0.log" | head -1 | awk '{print $2}')
[ -n "$made" ] && [ "$made" -ge 1 ] || { tail "$R/logs/rollout-sat0.log"; fail "the satellite made no group"; }
echo "test_satellite_tls: ok (satellite rollout-sat0 on rediss://$host:$port from step $up made $made groups)"
