#!/usr/bin/env bash
# `cpt preflight` checks a reward plugin without loading it: a good plugin passes, and one whose constructor writes a
# marker file leaves no marker (a real load in the same test does write it); a non-ELF file, a shared object without
# the plugin functions and a bare name missing from the plugins folder fail with the reason; a bare name present
# there (build/plugins) passes.
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
CPT="$BUILD/cpt"
T=$(mktemp -d /tmp/cpt-plugin-preflight-XXXXXX)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
export CPT_TEST_PLUGIN_MARKER="$T/marker"
grpo=(examples/grpo_arithmetic.toml async.mode=sync run.dir="$T/run" reward.type=plugin)
pre() { "$CPT" preflight "${grpo[@]}" "$@" > "$T/out" 2>&1; }

pre reward.plugin_path="$BUILD/plugins/libreward_keyword.so" || { cat "$T/out"; fail "keyword plugin"; }
grep -Eq 'ok +plugin +.*libreward_keyword.so: an ELF shared object' "$T/out" || { cat "$T/out"; fail "no plugin line"; }

pre reward.plugin_path="$BUILD/plugins/libreward_ctor_test.so" || { cat "$T/out"; fail "ctor plugin"; }
[ -e "$T/marker" ] && fail "preflight ran the plugin's constructor"
pre reward.type=combined 'reward.combine=["math:1", "plugin:0.5"]' \
  reward.plugin_path="$BUILD/plugins/libreward_ctor_test.so" || { cat "$T/out"; fail "combined with the ctor plugin"; }
[ -e "$T/marker" ] && fail "preflight (combined) ran the plugin's constructor"
# the control: a real load runs the constructor (a plugin of a sanitizer build needs its runtime loaded first: gcc's
# libasan, which the plugin names as needed, or else clang's, which also holds the UBSan and coverage hooks)
asan=
if nm -D "$BUILD/plugins/libreward_ctor_test.so" 2>/dev/null | grep -q __asan_init; then
  if readelf -d "$BUILD/plugins/libreward_ctor_test.so" | grep -q 'NEEDED.*libasan'; then
    asan=$(cc -print-file-name=libasan.so)
  else
    asan=$(clang -print-file-name=libclang_rt.asan-x86_64.so)
  fi
fi
LD_PRELOAD=$asan ASAN_OPTIONS=detect_leaks=0 python3 - "$BUILD/plugins/libreward_ctor_test.so" <<'PY'
import ctypes, sys
ctypes.CDLL(sys.argv[1])
PY
[ -e "$T/marker" ] || fail "loading the test plugin wrote no marker: the checks above are vacuous"

bad() { # PATTERN PLUGIN_PATH
  if pre reward.plugin_path="$2"; then cat "$T/out"; fail "preflight passed $2"; fi
  grep -Eq "FAIL +reward .*$1" "$T/out" || { cat "$T/out"; fail "$2: no FAIL matching '$1'"; }
}
bad 'not an ELF file' "$SRC/examples/grpo_arithmetic.toml"
libm=$(ls /lib/*-linux-gnu/libm.so.6 2>/dev/null | head -1)
[ -n "$libm" ] && bad 'does not export cpt_reward_plugin_abi' "$libm"
bad 'no such file in the plugins folder' libnothere.so
bad 'not a regular file' /tmp
pre reward.plugin_path=libreward_keyword.so || { cat "$T/out"; fail "a bare name in $BUILD/plugins"; }
grep -q "$BUILD/plugins/libreward_keyword.so" "$T/out" || grep -q "plugins/libreward_keyword.so" "$T/out" ||
  { cat "$T/out"; fail "the bare name's resolved path is not shown"; }
echo "ok: preflight checks plugins without loading them"
