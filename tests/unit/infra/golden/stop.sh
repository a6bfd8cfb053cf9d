set -u
ctr=$(docker ps -q --filter "label=com.docker.swarm.service.name=ds-master" | head -n1)
[ -n "$ctr" ] || { echo "stop: no task of ds-master here; nothing to stop"; exit 0; }
docker exec "$ctr" pkill -TERM -f /opt/dss/train.py || true
for i in $(seq 1 120); do
  if ! docker exec "$ctr" pgrep -f /opt/dss/train.py >/dev/null 2>&1; then
    echo "stop: training exited"
    exit 0
  fi
  sleep 1
done
echo "stop: still running after 120s (blocked: a peer is gone?); SIGKILL" >&2
docker exec "$ctr" pkill -KILL -f /opt/dss/train.py || true
