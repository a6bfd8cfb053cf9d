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
err=$(grep -v '^supervisor: ' "$log" 2>/dev/null | grep -E 'dss-train: error|exits with return code|exited with exit code|Traceback|Error|Killed' | tail -n1)
echo "error=$(printf %s "$err" | cut -c1-300)"
ck=$(ls -d /data/checkpoints/run1/step_*/MANIFEST.json 2>/dev/null \
  | sort | tail -n1)
[ -n "$ck" ] && echo "checkpoint=$(basename "$(dirname "$ck")")"
exit 0
