# deepspeed-swarm: the supervisor of run run (infra/render/run.py)
set -u
mkdir -p /data/logs/run
cd /data/code/run/0123456789ab
rm -f /data/logs/run/exit.1.json
mkdir -p /data/checkpoints/run /data/outputs/run
set +u
while IFS= read -r dss_line || [ -n "$dss_line" ]; do
  eval "export ${dss_line%%=*}=\"${dss_line#*=}\""
done </data/.dss/run/env-1
set -u
metrics() {
  mkdir -p /data/.dss/metrics && printf '# HELP dss_run_restarts_total Automatic restarts of the launcher by the run supervisor (since this launch).\n# TYPE dss_run_restarts_total counter\ndss_run_restarts_total{run="run",supervisor="1"} %s\n# HELP dss_run_restart_budget_spent 1 once the supervisor gave up: training.recovery.max_restarts spent.\n# TYPE dss_run_restart_budget_spent gauge\ndss_run_restart_budget_spent{run="run",supervisor="1"} %s\n' "$1" "$2" >/data/.dss/metrics/run.1.prom.new && mv /data/.dss/metrics/run.1.prom.new /data/.dss/metrics/run.1.prom
}
metrics 0 0
restarts=0
while :; do
  rc=0
  start=$(grep -c "" /data/logs/run/launcher.log 2>/dev/null || true)
  torchrun --nnodes=3 --nproc_per_node=8 --node_rank=1 --master_addr=10.0.1.3 --master_port=29500 /data/code/run/0123456789ab/train.py --deepspeed_config ds_universal.json >>/data/logs/run/launcher.log 2>&1 || rc=$?
  python3 /data/.dss/run/exitrecord.py record /data/logs/run/launcher.log "${start:-0}" "$rc" 1 /data/logs/run/exit.1.json 2>/dev/null || true
  if [ "$rc" -eq 0 ] || [ -e /data/.dss/run/stop ]; then exit "$rc"; fi
  if [ "$restarts" -ge 3 ]; then
    echo "supervisor: the launcher exited $rc; restart budget (3) spent" >>/data/logs/run/launcher.log
    printf '{"event":"budget_spent","exit_code":%s,"time":%s}\n' "$rc" "$(date +%s)" \
      >>/data/logs/run/restarts.jsonl
    metrics "$restarts" 1
    exit "$rc"
  fi
  restarts=$((restarts + 1))
  printf '{"event":"restart","restart":%s,"exit_code":%s,"time":%s}\n' \
    "$restarts" "$rc" "$(date +%s)" >>/data/logs/run/restarts.jsonl
  metrics "$restarts" 0
  echo "supervisor: the launcher exited $rc; restart $restarts of 3 in 10s, from the newest complete checkpoint" >>/data/logs/run/launcher.log
  pkill -KILL -f /data/code/run/0123456789ab/train.py 2>/dev/null || true
  sleep 10
  if [ -e /data/.dss/run/stop ]; then exit "$rc"; fi
done
