set -eu
svc=ds-master
health_fmt='{{if .State.Health}}{{.State.Health.Status}}{{else}}none{{end}}'
ctr=""
for i in $(seq 1 300); do
  ctr=$(docker ps -q --filter "label=com.docker.swarm.service.name=$svc" | head -n1)
  if [ -n "$ctr" ]; then
    health=$(docker inspect -f "$health_fmt" "$ctr")
    [ "$health" = healthy ] || [ "$health" = none ] && break
  fi
  sleep 1
done
if [ -z "$ctr" ]; then
  echo "no running task of $svc on $(hostname) after 300s" >&2
  exit 1
fi
printf %s '10.0.1.3 slots=8
10.0.1.4 slots=8
10.0.1.5 slots=8
' | docker exec -i -u 1000 "$ctr" sh -c 'mkdir -p $(dirname /data/.dss/run/hostfile) && cat > /data/.dss/run/hostfile.new.$(hostname).$$ && mv /data/.dss/run/hostfile.new.$(hostname).$$ /data/.dss/run/hostfile'
printf %s '<infra/task/forkserver.py, its #! line first>' | docker exec -i -u 1000 "$ctr" sh -c 'mkdir -p $(dirname /data/.dss/run/bin/python) && cat > /data/.dss/run/bin/python.new.$(hostname).$$ && chmod 755 /data/.dss/run/bin/python.new.$(hostname).$$ && mv /data/.dss/run/bin/python.new.$(hostname).$$ /data/.dss/run/bin/python'
printf %s 'FROM_DS_ENV=1
A=b c
DSS_CODE_DIR=/data/code/run/0123456789ab
DSS_CHECKPOINT_DIR=/data/checkpoints/run
DSS_LOG_DIR=/data/logs/run
DSS_OUTPUT_DIR=/data/outputs/run
DSS_METRICS_FILE=/data/logs/run/metrics.jsonl
DSS_NODES=10.0.1.3,10.0.1.4,10.0.1.5
DSS_HOSTFILE=/data/.dss/run/hostfile
DSS_STEPS=1000
DSS_CKPT_EVERY=50
DSS_DS_CONFIG=/opt/dss/ds_config.json
' | docker exec -i -u 1000 "$ctr" sh -c 'mkdir -p $(dirname /data/.dss/run/env) && cat > /data/.dss/run/env.new.$(hostname).$$ && mv /data/.dss/run/env.new.$(hostname).$$ /data/.dss/run/env'
printf %s '<infra/task/exitrecord.py>' | docker exec -i -u 1000 "$ctr" sh -c 'mkdir -p $(dirname /data/.dss/run/exitrecord.py) && cat > /data/.dss/run/exitrecord.py.new.$(hostname).$$ && mv /data/.dss/run/exitrecord.py.new.$(hostname).$$ /data/.dss/run/exitrecord.py'
printf %s '<infra/task/ranks.py>' | docker exec -i -u 1000 "$ctr" sh -c 'mkdir -p $(dirname /data/.dss/run/ranks.py) && cat > /data/.dss/run/ranks.py.new.$(hostname).$$ && mv /data/.dss/run/ranks.py.new.$(hostname).$$ /data/.dss/run/ranks.py'
printf %s '<infra/task/commandranks.py>' | docker exec -i -u 1000 "$ctr" sh -c 'mkdir -p $(dirname /data/.dss/run/commandranks.py) && cat > /data/.dss/run/commandranks.py.new.$(hostname).$$ && mv /data/.dss/run/commandranks.py.new.$(hostname).$$ /data/.dss/run/commandranks.py'
printf %s '<infra/task/universal.py>' | docker exec -i -u 1000 "$ctr" sh -c 'mkdir -p $(dirname /data/.dss/run/universal.py) && cat > /data/.dss/run/universal.py.new.$(hostname).$$ && mv /data/.dss/run/universal.py.new.$(hostname).$$ /data/.dss/run/universal.py'
printf %s '<infra/task/follow.py>' | docker exec -i -u 1000 "$ctr" sh -c 'mkdir -p $(dirname /data/.dss/run/follow.py) && cat > /data/.dss/run/follow.py.new.$(hostname).$$ && mv /data/.dss/run/follow.py.new.$(hostname).$$ /data/.dss/run/follow.py'
printf %s '{"addresses":["10.0.0.1","10.0.0.2","10.0.0.3"],"events":"/data/logs/run/restarts.jsonl","hostfile":"/data/.dss/run/hostfile","interval_s":5,"misses":3,"names":[],"port":2222,"wait_s":180}' | docker exec -i -u 1000 "$ctr" sh -c 'mkdir -p $(dirname /data/.dss/run/follow.json) && cat > /data/.dss/run/follow.json.new.$(hostname).$$ && mv /data/.dss/run/follow.json.new.$(hostname).$$ /data/.dss/run/follow.json'
printf %s '<the supervisor>' | docker exec -i -u 1000 "$ctr" sh -c 'mkdir -p $(dirname /data/.dss/run/supervise.sh) && cat > /data/.dss/run/supervise.sh.new.$(hostname).$$ && mv /data/.dss/run/supervise.sh.new.$(hostname).$$ /data/.dss/run/supervise.sh'
if docker exec "$ctr" pgrep -f /data/.dss/run/bin/python >/dev/null 2>&1 || docker exec "$ctr" pgrep -f /data/.dss/run/supervise.sh >/dev/null 2>&1; then  # idempotent
  echo "launch: $svc on $(hostname) already running; kept"
  exit 0
fi
docker exec -u 1000 "$ctr" sh -c 'rm -f ~/.ssh/known_hosts'
docker exec -u 1000 "$ctr" rm -f /data/.dss/run/stop
start=$(docker exec "$ctr" sh -c 'grep -c "" /data/logs/run/launcher.log 2>/dev/null || true')
docker exec -d -u 1000 "$ctr" sh -c 'exec sh /data/.dss/run/supervise.sh'
echo "launch: started on $(hostname) in $ctr"
for i in $(seq 1 600); do
  new=$(docker exec "$ctr" tail -n +$((start + 1)) /data/logs/run/launcher.log 2>/dev/null || true)
  bad=$(printf '%s\n' "$new" | grep -E -m1 'NCCL INFO (Using network Socket|NET/Socket : Using)|via NET/Socket|NCCL WARN .*(network IB not found|Failed to initialize any NET plugin)|NET/IB : No device found' || true)
  if [ -n "$bad" ]; then
    docker exec -u 1000 "$ctr" touch /data/.dss/run/stop
    docker exec "$ctr" pkill -TERM -f /data/code/run/0123456789ab/train.py || true
    echo "launch: RDMA is declared but NCCL did not use it; training stopped. NCCL said: $bad" >&2
    exit 1
  fi
  ok=$(printf '%s\n' "$new" | grep -E -m1 'NCCL INFO Using network IB' || true)
  if [ -n "$ok" ]; then echo "launch: NCCL uses IB: $ok"; exit 0; fi
  sleep 1
done
echo "launch: NCCL named no transport within 600s (NCCL_DEBUG below INFO?); NCCL_NET=IB allows no fallback" >&2
