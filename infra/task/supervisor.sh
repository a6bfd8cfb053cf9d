#@ The run's supervisor (POSIX sh), rendered by infra/render/supervisor.py
#@ supervisor_script and written by the launch beside the hostfile
#@ (/data/.dss/<run>/supervise[-<node rank>].sh), then run detached in the training
#@ task as the training user: `sh <that file>`. It runs the launcher; when it exits
#@ non-zero and no stop was asked for, records the restart, kills the ranks left on
#@ this node, waits and runs it again (the training resumes from the newest complete
#@ checkpoint), up to the restart budget. Lines starting `#@` are the template's own
#@ (infra/render/template.py): they never reach the task.
#@
#@ Its bytes are part of the launch script, a resource input: a byte changed relaunches
#@ every run on upgrade. tests/unit/infra/golden/scripts/ holds every variant.
#@
#@ Parts:     metrics           keep the restart counts as Prometheus text (monitoring)
#@            follow            training.recovery.follow_moves (infra/task/follow.py)
#@            forget_host_keys  follow on the host data plane: forget the learnt keys
#@            master_moves      training.recovery.follow_master (infra/task/takeover.py)
#@            exit_record       training.command: an exit record after each attempt
#@            universal         a command whose DeepSpeed config loads universal
#@                              checkpoints: the newest one made universal first
#@                              (infra/task/universal.py; rank 0's supervisor only)
#@ Values are shell words as the renderer quoted them: paths, the launcher command line
#@ @CMD@, the numbers @MAX_RESTARTS@ and @DELAY_S@, and the block @SETUP@ (a
#@ training.command's environment, infra/task/envsetup.sh; '' without one).
#@ The first line names infra/render/run.py, where the renderer was before the split:
#@ another path would relaunch every run on a stack that changed nothing.
# deepspeed-swarm: the supervisor of run @RUN_NAME@ (infra/render/run.py)
set -u
mkdir -p @LOG_DIR@
cd @WORKDIR@
#@if exit_record
#@ A new supervisor removes the record a previous launch left.
rm -f @EXIT_RECORD@
#@end
@SETUP@
#@if master_moves
#@ The claim on the run: the active file names this task, keeping the takeovers
#@ counted so far; owner() says whether it still does (a task that took the run over
#@ meanwhile owns it).
n=0
[ -f @ACTIVE@ ] && read -r _t _s n <@ACTIVE@
printf '%s %s %s\n' "${DSS_TASK_ID:-}" "${DSS_SPEC:-}" "${n:-0}" >@ACTIVE@.new && mv @ACTIVE@.new @ACTIVE@
touch @LEASE@
owner() { read -r t _r <@ACTIVE@ 2>/dev/null && [ "$t" = "${DSS_TASK_ID:-}" ]; }
#@end
#@if metrics
#@ Replaced, never rewritten in place: the node exporter never reads half a file.
metrics() {
  mkdir -p @METRICS_DIR@ && printf '@METRICS_TEXT@' "$1" "$2" >@METRICS_NEW@ && mv @METRICS_NEW@ @METRICS_FILE@
}
metrics 0 0
#@end
restarts=0
while :; do
#@if master_moves
  owner || exit 0
#@end
  rc=0
#@if exit_record
  start=$(grep -c "" @LOG@ 2>/dev/null || true)
#@end
#@if universal
  #@ A conversion that fails is this attempt's failure: no launcher, its error in
  #@ the log (and so in the exit record), the budget decides.
  @IMAGE_PYTHON@ @UNIVERSAL_PROGRAM@ @CHECKPOINT_DIR@ >>@LOG@ 2>&1 || rc=$?
  #@ A stop while it converted (the stop kills the converter): no launcher.
  #@if master_moves
  if [ -e @STOP@ ]; then { owner && rm -f @ACTIVE@; }; exit 0; fi
  #@else
  if [ -e @STOP@ ]; then exit 0; fi
  #@end
  if [ "$rc" -eq 0 ]; then
#@end
#@if follow
  #@ The hostfile rebuilt from the tasks that answer, then the launcher under the
  #@ watch, which stops it once a hostfile address stops answering (a restart).
  #@ follow_master: @FOLLOW_PROGRAM@ is takeover.py, which wraps follow.py.
  python3 @FOLLOW_PROGRAM@ rebuild @FOLLOW_SETTINGS@ >>@LOG@ 2>&1 || true
  #@if master_moves
  if [ -e @STOP@ ]; then { owner && rm -f @ACTIVE@; }; exit 0; fi
  owner || exit 0
  #@else
  if [ -e @STOP@ ]; then exit 0; fi
  #@end
  #@if forget_host_keys
  rm -f ~/.ssh/known_hosts
  #@end
  #@if master_moves
  #@ Rank 0's address is the hostfile's first, which the rebuild made this task's own.
  master=$(awk 'NR==1{print $1; exit}' @HOSTFILE@)
  #@end
  @CMD@ >>@LOG@ 2>&1 &
  pid=$!
  python3 @FOLLOW_PROGRAM@ watch @FOLLOW_SETTINGS@ "$pid" >>@LOG@ 2>&1 \
    || pkill -KILL -f @PATTERN@ 2>/dev/null || true
  wait "$pid" || rc=$?
#@else
  @CMD@ >>@LOG@ 2>&1 || rc=$?
#@end
#@if universal
  fi
#@end
#@if exit_record
  python3 @EXITRECORD_PROGRAM@ record @LOG@ "${start:-0}" "$rc" @NODE@ @EXIT_RECORD@ 2>/dev/null || true
#@end
#@if master_moves
  if ! owner; then
    echo "supervisor: another master task took the run over; stopping here" >>@LOG@
    pkill -KILL -f @PATTERN@ 2>/dev/null || true
    exit 0
  fi
  if [ "$rc" -eq 0 ] || [ -e @STOP@ ]; then { owner && rm -f @ACTIVE@; }; exit "$rc"; fi
#@else
  if [ "$rc" -eq 0 ] || [ -e @STOP@ ]; then exit "$rc"; fi
#@end
  if [ "$restarts" -ge @MAX_RESTARTS@ ]; then
    echo "supervisor: the launcher exited $rc; restart budget (@MAX_RESTARTS@) spent" >>@LOG@
    printf '{"event":"@BUDGET_SPENT@","exit_code":%s,"time":%s}\n' "$rc" "$(date +%s)" \
      >>@RESTARTS@
#@if metrics
    metrics "$restarts" 1
#@end
#@if master_moves
    { owner && rm -f @ACTIVE@; }; exit "$rc"
#@else
    exit "$rc"
#@end
  fi
  restarts=$((restarts + 1))
  printf '{"event":"restart","restart":%s,"exit_code":%s,"time":%s}\n' \
    "$restarts" "$rc" "$(date +%s)" >>@RESTARTS@
#@if metrics
  metrics "$restarts" 0
#@end
  echo "supervisor: the launcher exited $rc; restart $restarts of @MAX_RESTARTS@ in @DELAY_S@s, from the newest complete checkpoint" >>@LOG@
  pkill -KILL -f @PATTERN@ 2>/dev/null || true
  sleep @DELAY_S@
#@if master_moves
  if [ -e @STOP@ ]; then { owner && rm -f @ACTIVE@; }; exit "$rc"; fi
#@else
  if [ -e @STOP@ ]; then exit "$rc"; fi
#@end
done
