#!/bin/bash
# Healthcheck: fails when sshd is gone or does not answer, or, on GPU hosts
# (NVIDIA_VISIBLE_DEVICES set to devices), when nvidia-smi sees no GPU or fewer
# than DSS_EXPECTED_GPUS.
set -uo pipefail
fail() { echo "unhealthy: $*"; exit 1; }
state="${DSS_SSHD_DIR:-${HOME:-/home/dss}/.sshd}"
port="${DSS_SSH_PORT:-2222}"
pid="$(cat "$state/sshd.pid" 2>/dev/null)" || fail "sshd pid file missing"
kill -0 "$pid" 2>/dev/null || fail "sshd (pid $pid) is not running"
# A listening socket on the port (read from /proc: connecting would make sshd log
# an aborted key exchange every interval).
hexport="$(printf '%04X' "$port")"
grep -qE "^ *[0-9]+: [0-9A-F]+:${hexport} [0-9A-F]+:0000 0A " /proc/net/tcp /proc/net/tcp6 2>/dev/null \
  || fail "sshd does not listen on port $port"
case "${NVIDIA_VISIBLE_DEVICES:-}" in
  ""|void|none) ;;
  *)
    command -v nvidia-smi >/dev/null || fail "NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES but no nvidia-smi"
    n="$(timeout 20 nvidia-smi -L 2>/dev/null | grep -c '^GPU ')" || fail "nvidia-smi failed"
    [ "$n" -ge "${DSS_EXPECTED_GPUS:-1}" ] || fail "nvidia-smi sees $n GPUs, expected ${DSS_EXPECTED_GPUS:-1}"
    ;;
esac
echo "healthy"
