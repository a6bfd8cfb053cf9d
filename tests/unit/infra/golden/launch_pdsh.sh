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
' | docker exec -i -u 1000 "$ctr" sh -c 'mkdir -p $(dirname /data/.dss/run/hostfile) && cat > /data/.dss/run/hostfile.new && mv /data/.dss/run/hostfile.new /data/.dss/run/hostfile'
printf %s '{"train_micro_batch_size_per_gpu":1}' | docker exec -i -u 1000 "$ctr" sh -c 'mkdir -p $(dirname /data/.dss/run/ds_config.json) && cat > /data/.dss/run/ds_config.json.new && mv /data/.dss/run/ds_config.json.new /data/.dss/run/ds_config.json'
if docker exec "$ctr" pgrep -f deepspeed >/dev/null 2>&1; then  # idempotent
  echo "launch: $svc on $(hostname) already running; kept"
  exit 0
fi
docker exec -d -u 1000 "$ctr" sh -c 'mkdir -p /data/logs/run && cd /opt/dss && exec deepspeed --hostfile=/data/.dss/run/hostfile --master_addr=10.0.1.3 --master_port=29500 --launcher=pdsh --ssh_port=2222 --num_nodes=3 /opt/dss/train.py >>/data/logs/run/launcher.log 2>&1'
echo "launch: started on $(hostname) in $ctr"
