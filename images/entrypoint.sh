#!/bin/bash
# Entrypoint of the training image (runs under tini -g, as uid 1000).
#  1. installs the SSH key pair from Swarm secrets (never baked into the image):
#     $DSS_SSH_PRIVATE_KEY_FILE (default /run/secrets/ssh_private_key) and
#     $DSS_SSH_PUBLIC_KEY_FILE  (default /run/secrets/ssh_public_key; derived
#     from the private key if absent). DSS_REQUIRE_SSH_KEY=1 makes a missing key fatal.
#  2. generates SSH host keys on first start, starts sshd on $DSS_SSH_PORT (2222).
#  3. with no arguments keeps running as the node's long-lived process (exits when
#     sshd dies); with arguments runs them (e.g. a torchrun/deepspeed command) and
#     exits with their status, sshd alongside.
# Started as root (docker run -u 0) it re-executes itself as the training user.
set -euo pipefail
say() { echo "[entrypoint] $*" >&2; }

if [ "$(id -u)" = 0 ]; then
  uid="$(id -u dss)"
  say "started as root: dropping to dss ($uid)"
  HOME=/home/dss USER=dss LOGNAME=dss exec setpriv --reuid="$uid" --regid="$uid" --init-groups \
    "$0" "$@"
fi
if [ -z "${HOME:-}" ] || [ "$HOME" = / ]; then export HOME=/home/dss; fi

port="${DSS_SSH_PORT:-2222}"
priv="${DSS_SSH_PRIVATE_KEY_FILE:-/run/secrets/ssh_private_key}"
pub="${DSS_SSH_PUBLIC_KEY_FILE:-/run/secrets/ssh_public_key}"
state="${DSS_SSHD_DIR:-$HOME/.sshd}"

umask 077
mkdir -p "$HOME/.ssh" "$state"
chmod 700 "$HOME/.ssh" "$state"

have_key=0
if [ -r "$priv" ]; then
  install -m 600 "$priv" "$HOME/.ssh/id_dss"
  have_key=1
fi
if [ -r "$pub" ]; then
  install -m 600 "$pub" "$HOME/.ssh/authorized_keys"
elif [ "$have_key" = 1 ]; then
  ssh-keygen -y -f "$HOME/.ssh/id_dss" > "$HOME/.ssh/authorized_keys"
fi
if [ ! -s "$HOME/.ssh/authorized_keys" ]; then
  if [ "${DSS_REQUIRE_SSH_KEY:-0}" = 1 ]; then
    say "error: no SSH public key at $pub (nor a private key at $priv)"; exit 1
  fi
  say "warning: no SSH key at $pub / $priv: sshd will accept no logins"
fi
cat > "$HOME/.ssh/config" <<CFG
Host *
  Port $port
  User dss
  IdentityFile ~/.ssh/id_dss
  IdentitiesOnly yes
  BatchMode yes
  StrictHostKeyChecking ${DSS_SSH_STRICT_HOST_KEYS:-accept-new}
  UserKnownHostsFile ~/.ssh/known_hosts
  LogLevel ERROR
CFG
# Environment for commands started over ssh (pdsh, deepspeed's launcher).
env | grep -E '^(PATH|PYTHON[A-Z_]*|DS_[A-Z_]+|DSS_[A-Z_]+|NCCL_[A-Z_]+|GLOO_[A-Z_]+|OMP_[A-Z_]+|NVIDIA_[A-Z_]+|CUDA_[A-Z_]+|LD_LIBRARY_PATH|PDSH_RCMD_TYPE|USE_LIBUV|OPENBLAS_NUM_THREADS)=' \
  | grep -v '_KEY=' > "$HOME/.ssh/environment" || true
echo "HOME=$HOME" >> "$HOME/.ssh/environment"

if [ ! -s "$state/ssh_host_ed25519_key" ]; then
  ssh-keygen -q -t ed25519 -N '' -C "$(hostname)" -f "$state/ssh_host_ed25519_key"
  say "generated SSH host key $(ssh-keygen -lf "$state/ssh_host_ed25519_key.pub" | cut -d' ' -f2)"
fi

/usr/sbin/sshd -D -e -f /opt/dss/sshd_config -p "$port" \
  -h "$state/ssh_host_ed25519_key" -o PidFile="$state/sshd.pid" &
sshd_pid=$!
say "sshd pid $sshd_pid listening on port $port"

# tini -g sends SIGTERM to the whole process group; keep the shell alive until
# the command has finished (it checkpoints on SIGTERM) and pass on its status.
trap 'say "SIGTERM received"' TERM INT
if [ "$#" -gt 0 ]; then
  "$@" &
  cmd_pid=$!
  rc=0
  while :; do
    wait "$cmd_pid" && rc=0 || rc=$?
    kill -0 "$cmd_pid" 2>/dev/null || break
  done
  say "command exited with status $rc"
  kill "$sshd_pid" 2>/dev/null || true
  exit "$rc"
fi
while kill -0 "$sshd_pid" 2>/dev/null; do
  wait "$sshd_pid" || true
done
say "sshd exited"
exit 1
