#!/usr/bin/env bash
# A queue password never shows: `cpt config show` and `cpt preflight` print queue.url redacted, preflight refuses a
# password inside queue.url (it names queue.password_file instead), and a refused `cpt run` writes no config.toml.
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
CPT="$BUILD/cpt"
T=$(mktemp -d /tmp/cpt-secrets-XXXXXX)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
PW='Zq7-s3cret-pw'
grpo=(examples/grpo_arithmetic.toml async.mode=sync run.dir="$T/run")
for url in "redis://:$PW@127.0.0.1:1/0" "redis://alice:$PW@node-1:6400" "redis://:p@$PW/x@host:7/1" \
           "redis://127.0.0.1:1/0?password=$PW"; do
  "$CPT" config show "${grpo[@]}" "queue.url=$url" > "$T/show" 2>&1 || { cat "$T/show"; fail "config show $url"; }
  grep -q "$PW" "$T/show" && fail "config show prints the password of $url"
  grep -q '^url = ".*\*\*\*' "$T/show" || { grep url "$T/show"; fail "config show: no redacted url for $url"; }
  if "$CPT" preflight "${grpo[@]}" "queue.url=$url" > "$T/pre" 2>&1; then cat "$T/pre"; fail "preflight passed $url"; fi
  grep -q "$PW" "$T/pre" && { cat "$T/pre"; fail "preflight prints the password of $url"; }
  grep -Eq 'FAIL +queue ' "$T/pre" || { cat "$T/pre"; fail "preflight: no queue FAIL for $url"; }
  if "$CPT" run "${grpo[@]}" "queue.url=$url" > "$T/run.log" 2>&1; then fail "cpt run started with $url"; fi
  grep -q "$PW" "$T/run.log" && { cat "$T/run.log"; fail "cpt run prints the password of $url"; }
  [ -e "$T/run/config.toml" ] && fail "cpt run wrote config.toml for $url"
done
# A secret in another key's URL (a plugin's service): the roles need it in config.toml, but printing hides it.
"$CPT" config show "${grpo[@]}" "reward.plugin_config=https://svc:$PW@api.example/v1" > "$T/show" 2>&1 ||
  fail "config show with a plugin URL"
grep -q "$PW" "$T/show" && fail "config show prints the plugin URL's password"
grep -q '^plugin_config = "https://svc:\*\*\*@api.example/v1"' "$T/show" || { grep plugin_config "$T/show"; fail "plugin_config"; }
# The password in a file: the URL is shown as given, the file is checked (mode 0600), its content never printed.
printf '%s\n' "$PW" > "$T/pw"
chmod 644 "$T/pw"
if "$CPT" preflight "${grpo[@]}" queue.url=redis://127.0.0.1:1/0 queue.password_file="$T/pw" > "$T/pre" 2>&1; then
  fail "preflight passed a 0644 password file"
fi
grep -q 'mode 0644' "$T/pre" || { cat "$T/pre"; fail "preflight: the file's mode is not named"; }
chmod 600 "$T/pw"
"$CPT" preflight "${grpo[@]}" queue.url=redis://127.0.0.1:1/0 queue.password_file="$T/pw" > "$T/pre" 2>&1 || true
grep -Eq 'ok +queue +redis://127.0.0.1:1/0 \(not started by cpt\)' "$T/pre" || { cat "$T/pre"; fail "no ok queue line"; }
grep -q "$PW" "$T/pre" && fail "preflight prints the password file's content"
# TLS files: unreadable ones fail, a cert without its key fails, a key others may read is a warning.
if "$CPT" preflight "${grpo[@]}" queue.tls_cert="$T/none.crt" > "$T/pre" 2>&1; then fail "preflight passed a missing cert"; fi
grep -Eq "FAIL +queue +queue.tls_cert = $T/none.crt: not a readable file" "$T/pre" || { cat "$T/pre"; fail "missing cert"; }
grep -Eq 'FAIL +queue +queue.tls_cert and queue.tls_key go together' "$T/pre" || { cat "$T/pre"; fail "cert without key"; }
echo cert > "$T/a.crt"; echo key > "$T/a.key"; chmod 644 "$T/a.key"
"$CPT" preflight "${grpo[@]}" queue.tls_cert="$T/a.crt" queue.tls_key="$T/a.key" > "$T/pre" 2>&1 || true
grep -Eq "warn +queue +queue.tls_key $T/a.key has mode 0644" "$T/pre" || { cat "$T/pre"; fail "no warning on a 0644 key"; }
grep -Eq 'FAIL +queue' "$T/pre" && { cat "$T/pre"; fail "a readable cert and key failed"; }
echo "ok: queue passwords never printed (4 URL shapes x config show, preflight, run; a password file); TLS files checked"
