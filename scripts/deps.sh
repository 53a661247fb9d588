#!/usr/bin/env bash
# Installs the Debian packages cpt needs that are missing (as root, or through sudo). Idempotent and quiet when
# everything is there.
set -euo pipefail
pkgs=(build-essential cmake pkg-config clang libclang-rt-14-dev libomp-14-dev
      libhiredis-dev libmsgpack-dev libpmix-dev libjansson-dev libpcre2-dev libutf8proc-dev libssl-dev openssl
      libopenmpi-dev openmpi-bin redis-server redis-tools slurm-wlm munge gnuplot-nox nodejs npm python3 ca-certificates)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
# npm and nodejs may be present from another source; do not fight it.
if command -v npm >/dev/null 2>&1; then
  missing=("${missing[@]/npm}"); missing=("${missing[@]/nodejs}")
fi
read -r -a missing <<<"${missing[*]}"
[ ${#missing[@]} -eq 0 ] && exit 0
echo "deps: installing ${missing[*]}" >&2
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
