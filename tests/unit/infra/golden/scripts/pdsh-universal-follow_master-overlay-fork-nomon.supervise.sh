# deepspeed-swarm: the supervisor of run run (infra/render/run.py)
set -u
mkdir -p /data/logs/run
cd /data/code/run/0123456789ab
rm -f /data/logs/run/exit.master.json
mkdir -p /data/checkpoints/run /data/outputs/run
export DS_ENV_FILE=/data/.dss/run/env
set +u
while IFS= read -r dss_line || [ -n "$dss_line" ]; do
  eval "export ${dss_line%%=*}=\"${dss_line#*=}\""
done </data/.dss/run/env
set -u
n=0
[ -f /data/.dss/run/active ] && read -r _t _s n </data/.dss/run/active
printf '%s %s %s\n' "${DSS_TASK_ID:-}" "${DSS_SPEC:-}" "${n:-0}" >/data/.dss/run/active.new && mv /data/.dss/run/active.new /data/.dss/run/active
touch /data/.dss/run/lease
owner() { read -r t _r </data/.dss/run/active 2>/dev/null && [ "$t" = "${DSS_TASK_ID:-}" ]; }
restarts=0
while :; do
  owner || exit 0
  rc=0
  start=$(grep -c "" /data/logs/run/launcher.log 2>/dev/null || true)
  /opt/venv/bin/python /data/.dss/run/universal.py /data/checkpoints/run >>/data/logs/run/launcher.log 2>&1 || rc=$?
  if [ -e /data/.dss/run/stop ]; then { owner && rm -f /data/.dss/run/active; }; exit 0; fi
  if [ "$rc" -eq 0 ]; then
  python3 /data/.dss/run/takeover.py rebuild /data/.dss/run/follow.json >>/data/logs/run/launcher.log 2>&1 || true
  if [ -e /data/.dss/run/stop ]; then { owner && rm -f /data/.dss/run/active; }; exit 0; fi
  owner || exit 0
  master=$(awk 'NR==1{print $1; exit}' /data/.dss/run/hostfile)
  /data/.dss/run/bin/python -u -m deepspeed.launcher.runner --hostfile=/data/.dss/run/hostfile --master_addr="$master" --master_port=29500 --launcher=pdsh --ssh_port=2222 --num_nodes=3 /data/code/run/0123456789ab/train.py --deepspeed_config ds_universal.json >>/data/logs/run/launcher.log 2>&1 &
  pid=$!
  python3 /data/.dss/run/takeover.py watch /data/.dss/run/follow.json "$pid" >>/data/logs/run/launcher.log 2>&1 \
    || pkill -KILL -f /data/code/run/0123456789ab/train.py 2>/dev/null || true
  wait "$pid" || rc=$?
  fi
  python3 /data/.dss/run/exitrecord.py record /data/logs/run/launcher.log "${start:-0}" "$rc" master /data/logs/run/exit.master.json 2>/dev/null || true
  if ! owner; then
    echo "supervisor: another master task took the run over; stopping here" >>/data/logs/run/launcher.log
    pkill -KILL -f /data/code/run/0123456789ab/train.py 2>/dev/null || true
    exit 0
  fi
  if [ "$rc" -eq 0 ] || [ -e /data/.dss/run/stop ]; then { owner && rm -f /data/.dss/run/active; }; exit "$rc"; fi
  if [ "$restarts" -ge 3 ]; then
    echo "supervisor: the launcher exited $rc; restart budget (3) spent" >>/data/logs/run/launcher.log
    printf '{"event":"budget_spent","exit_code":%s,"time":%s}\n' "$rc" "$(date +%s)" \
      >>/data/logs/run/restarts.jsonl
    { owner && rm -f /data/.dss/run/active; }; exit "$rc"
  fi
  restarts=$((restarts + 1))
  printf '{"event":"restart","restart":%s,"exit_code":%s,"time":%s}\n' \
    "$restarts" "$rc" "$(date +%s)" >>/data/logs/run/restarts.jsonl
  echo "supervisor: the launcher exited $rc; restart $restarts of 3 in 10s, from the newest complete checkpoint" >>/data/logs/run/launcher.log
  pkill -KILL -f /data/code/run/0123456789ab/train.py 2>/dev/null || true
  sleep 10
  if [ -e /data/.dss/run/stop ]; then { owner && rm -f /data/.dss/run/active; }; exit "$rc"; fi
done
