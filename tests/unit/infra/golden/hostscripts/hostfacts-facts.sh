set -u
echo "hostname=$(hostname)"
echo "nic_mtu=$(cat /sys/class/net/eth0/mtu 2>/dev/null || echo 0)"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=uuid,driver_version --format=csv,noheader,nounits |
    while IFS=', ' read -r uuid drv; do echo "gpu=$uuid"; echo "driver=$drv"; done
fi
echo "docker=$(docker version --format '{{.Server.Version}}' 2>/dev/null || true)"
echo "default_runtime=$(docker info --format '{{.DefaultRuntime}}' 2>/dev/null || true)"
echo "swarm_resource=$(sed -n 's/^swarm-resource *= *"\(.*\)"/\1/p' \
  /etc/nvidia-container-runtime/config.toml 2>/dev/null | head -n1)"
if command -v nvidia-ctk >/dev/null 2>&1; then
  ctk=$(nvidia-ctk --version 2>/dev/null | sed -n 's/^.* version \([0-9][^ ]*\)$/\1/p' | head -n1)
  if [ -n "$ctk" ]; then
    echo "toolkit_version=$ctk"
    m='s/^[[:space:]]*mode[[:space:]]*=[[:space:]]*"\([^"]*\)".*/\1/p'
    sec='/^\[nvidia-container-runtime\]/,/^\[/'
    echo "toolkit_mode=$(nvidia-ctk config 2>/dev/null | sed -n "$sec$m" | head -n1)"
  fi
fi
