set -u
ctr=$(docker ps -q --filter "label=com.docker.swarm.service.name=ds-worker" | head -n1)
[ -n "$ctr" ] || { echo "stop: no task of ds-worker here; nothing to stop"; exit 0; }
docker exec -u 1000 "$ctr" touch /data/.dss/run/stop || true
ranks() {
  docker exec -e DSS_STOP_MODULE=mypkg.train "$ctr" /opt/venv/bin/python -S -E /data/.dss/run/commandranks.py "$1" 2>/dev/null || echo "?"
}
n=$(ranks term)
case "$n" in
  ''|*[!0-9]*)
    echo "stop: cannot tell the ranks apart ($n); SIGTERM to all of the training" >&2
    docker exec "$ctr" pkill -TERM -f '(-m|--module) mypkg\.train( |$)' || true ;;
  *) echo "stop: SIGTERM to $n rank(s)" ;;
esac
idle=0
end=$(($(date +%s) + 120))
while [ "$(date +%s)" -lt "$end" ]; do
  if ! docker exec "$ctr" pgrep -f '(-m|--module) mypkg\.train( |$)' >/dev/null 2>&1; then
    echo "stop: training exited"
    exit 0
  fi
  if [ "$(ranks count)" = 0 ]; then idle=$((idle + 1)); else idle=0; fi
  if [ "$idle" -eq 5 ]; then  # about that many seconds: one round each
    echo "stop: no rank left; SIGTERM to the launchers"
    docker exec "$ctr" pkill -TERM -f '(-m|--module) mypkg\.train( |$)' || true
  fi
  sleep 1
done
echo "stop: still running after 120s (blocked: a peer is gone?); SIGKILL" >&2
docker exec "$ctr" pkill -KILL -f '(-m|--module) mypkg\.train( |$)' || true
