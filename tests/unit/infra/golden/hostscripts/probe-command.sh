now=$(date +%s)
echo "now=$now"
sup=$(pgrep -f "$DSS_PROBE_SUPERVISOR" | head -n1 || true)
echo "supervisor=${sup:+1}"
[ -e /data/.dss/run1/stop ] && echo "stopping=1"
age=0; n=0
for p in $(pgrep -f "$DSS_PROBE_PATTERN" || true); do
  e=$(ps -o etimes= -p "$p" 2>/dev/null | tr -d ' ')
  [ -n "$e" ] || continue
  n=$((n + 1)); [ "$e" -gt "$age" ] && age=$e
done
echo "procs=$n"
echo "age=$age"
echo "last=$(tail -n1 /data/logs/run1/metrics.jsonl 2>/dev/null || true)"
echo "restarts=$(grep -c '"event":"restart"' /data/logs/run1/restarts.jsonl 2>/dev/null || true)"
echo "spent=$(grep -c '"event":"budget_spent"' /data/logs/run1/restarts.jsonl 2>/dev/null || true)"
log=/data/logs/run1/launcher.log
err=$(grep -v '^supervisor: ' "$log" 2>/dev/null | grep -E 'exits with return code|exited with exit code|Traceback|Killed' | tail -n1)
echo "error=$(printf %s "$err" | cut -c1-300)"
for f in /data/logs/run1/exit.*.json; do
  [ -f "$f" ] || continue
  n=${f##*/exit.}
  echo "exit.${n%.json}=$(head -c 8000 "$f" | tr -d '\n')"
done
echo "dsstep=$(grep -aoE '\[Rank 0\] step=[0-9]+' "$log" 2>/dev/null | tail -n1 | sed 's/.*step=//')"
echo "logtime=$(stat -c %Y "$log" 2>/dev/null || true)"
latest=$(head -c 200 /data/checkpoints/run1/latest 2>/dev/null | tr -d '\n' || true)
[ -z "$latest" ] && latest=$(ls -d /data/checkpoints/run1/step_* 2>/dev/null | sort | tail -n1 \
  | xargs -r basename)
[ -n "$latest" ] && echo "checkpoint=$latest"
ck=$(ls -d /data/checkpoints/run1/step_*/MANIFEST.json 2>/dev/null \
  | sort | tail -n1)
[ -n "$ck" ] && echo "checkpoint=$(basename "$(dirname "$ck")")"
exit 0
