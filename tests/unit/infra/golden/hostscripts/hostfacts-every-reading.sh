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
if command -v ibv_devinfo >/dev/null 2>&1; then
  ibv_devinfo -v -d mlx5_0 2>&1 | sed 's/^/ibv|/'
else
  echo "ibv_tool=missing"
fi
lsmod 2>/dev/null | awk '$1 == "nvidia_peermem" {print "peermem=loaded"}'
echo "daemon_json=$(base64 -w0 /etc/docker/daemon.json 2>/dev/null)"
echo "boot_id=$(cat /proc/sys/kernel/random/boot_id 2>/dev/null)"
{ dmesg 2>/dev/null || journalctl -k -o short-monotonic --no-pager -q 2>/dev/null; } |
  grep 'NVRM: Xid' | tail -n 200 | sed 's/^/xid|/'
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=uuid,ecc.errors.uncorrected.volatile.total,retired_pages.pending \
    --format=csv,noheader,nounits 2>/dev/null | sed 's/^/ecc|/'
  nvidia-smi --query-gpu=uuid,remapped_rows.pending,remapped_rows.failure \
    --format=csv,noheader,nounits 2>/dev/null | sed 's/^/remap|/'
fi
echo "nic|boot_id=$(cat /proc/sys/kernel/random/boot_id 2>/dev/null)"
echo "nic|speed=$(cat /sys/class/net/eth0/speed 2>/dev/null)"
for c in rx_errors rx_crc_errors tx_errors; do
  echo "nic|$c=$(cat /sys/class/net/eth0/statistics/$c 2>/dev/null)"
done
echo "nic|carrier_changes=$(cat /sys/class/net/eth0/carrier_changes 2>/dev/null)"
if command -v dcgmi >/dev/null 2>&1; then
  dcgm_out=$(dcgmi diag -r 1 -j 2>&1); echo "dcgm|rc=$?"
  echo "dcgm|out=$(printf %s "$dcgm_out" | base64 -w0)"
else
  echo "dcgm|tool=missing"
fi
