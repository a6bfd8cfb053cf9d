set -u
ctr=$(docker ps -q --filter "label=com.docker.swarm.service.name=ds-master" | head -n1)
[ -n "$ctr" ] || { echo "stop: no task of ds-master here; nothing to stop"; exit 0; }
docker exec -u 1000 "$ctr" touch /data/.dss/run/stop || true
docker exec "$ctr" pkill -KILL -f /data/.dss/run/universal.py || true
hosts=$(docker exec "$ctr" cat /data/.dss/run/hostfile | awk 'NF {printf "%s%s", s, $1; s = ","}')
ranks() {
  [ -n "$hosts" ] || { echo "?"; return; }
  docker exec -u 1000 -e 'PDSH_SSH_ARGS_APPEND=-p 2222' "$ctr" pdsh -S -t 5 -u 10 -w "$hosts" 'DSS_STOP_SCRIPT=/data/code/run/0123456789ab/train.py /opt/venv/bin/python -S -E /data/.dss/run/commandranks.py '"$1" 2>/dev/null |
    awk -F': ' '$2 ~ /^[0-9]+$/ {n += $2; k++} END {if (k) print n; else print "?"}'
}
n=$(ranks term)
case "$n" in
  ''|*[!0-9]*)
    echo "stop: cannot tell the ranks apart ($n); SIGTERM to all of the training" >&2
    docker exec "$ctr" pkill -TERM -f /data/code/run/0123456789ab/train.py || true ;;
  *) echo "stop: SIGTERM to $n rank(s)" ;;
esac
idle=0
end=$(($(date +%s) + 120))
while [ "$(date +%s)" -lt "$end" ]; do
  if ! docker exec "$ctr" pgrep -f /data/code/run/0123456789ab/train.py >/dev/null 2>&1; then
    echo "stop: training exited"
    exit 0
  fi
  if [ "$(ranks count)" = 0 ]; then idle=$((idle + 1)); else idle=0; fi
  if [ "$idle" -eq 5 ]; then  # about that many seconds: one round each
    echo "stop: no rank left; SIGTERM to the launchers"
    docker exec "$ctr" pkill -TERM -f /data/code/run/0123456789ab/train.py || true
  fi
  sleep 1
done
echo "stop: still running after 120s (blocked: a peer is gone?); SIGKILL" >&2
ranks kill >/dev/null
docker exec "$ctr" pkill -KILL -f /data/code/run/0123456789ab/train.py || true
