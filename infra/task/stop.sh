#@ The stop (POSIX sh), rendered by infra/render/stop.py stop_script: run over SSH on
#@ the launch's host when its command.remote.Command is deleted (a relaunch, which
#@ replaces it delete-before-replace, or a destroy). It ends the run gracefully: the
#@ ranks first (infra/task/ranks.py finds them; they finish the step, save a last
#@ checkpoint together and exit 0), then the launchers once no rank has been left for
#@ @LAUNCHERS_AFTER_S@ s, and SIGKILL after the grace period for what is left (a rank
#@ blocked on a lost peer cannot checkpoint, and would hold the rendezvous port). The
#@ pattern @PATTERN@ never matches the task's entrypoint or sshd: a task whose sshd
#@ dies exits, and Swarm restarts it elsewhere. Lines starting `#@` are the template's
#@ own (infra/render/template.py): they never reach the host.
#@
#@ Its bytes are the resource's `delete` input: a byte changed is an update of every
#@ launch on upgrade. tests/unit/infra/golden/scripts/ holds every variant.
#@
#@ Parts:  elsewhere        follow_master: the master task runs on another host since
#@                          a takeover; the marker is set on the shared data dir
#@                          (this host's path, @RUN_DIR@) and the stop waits for the
#@                          run's supervisor there to end (it removes the active file)
#@         stop_marker      the run's stop marker set first: its supervisor (which the
#@                          pattern does not match) restarts nothing and exits
#@         follow           follow_moves: the supervisor may wait in follow.py's
#@                          rebuild or watch, alive, where it would see the marker only
#@                          later: it and the follow program are killed first (neither
#@                          holds training state)
#@         takeover         follow_master: the takeover program too
#@         ranks_of_script  `ranks count|term`: ranks.py from stdin (its docstring cut),
#@                          the script in its environment, so that no command line in
#@                          the task but the ranks' own names it
#@         command_ranks    a training.command's `ranks count|term|kill`:
#@                          infra/task/commandranks.py from the run's dir
#@         universal        a command whose supervisor makes the newest checkpoint
#@                          universal before each attempt: the converter killed after
#@                          the marker (infra/task/universal.py; its supervisor then
#@                          sees the marker and exits)
#@         everywhere       under pdsh: on every hostfile host through pdsh, as the
#@                          training user with the launcher's sshd port (DeepSpeed's
#@                          runner sets PDSH_SSH_ARGS_APPEND the same way), the counts
#@                          summed; `?` when no host answered. The SIGKILL too.
set -u
ctr=$(docker ps -q --filter "label=com.docker.swarm.service.name=@SERVICE@" | head -n1)
#@if elsewhere
if [ -z "$ctr" ] && [ -e @RUN_DIR@/active ]; then
  touch @RUN_DIR@/stop || { echo "stop: cannot set the stop marker in @RUN_DIR@" >&2; exit 1; }
  echo "stop: no task of @SERVICE@ here; its run was taken over elsewhere: stop marker set"
  #@ The wait: the grace, the supervisor's restart delay, a margin.
  for i in $(seq 1 @ELSEWHERE_WAIT_S@); do
    if [ ! -e @RUN_DIR@/active ]; then echo "stop: training exited"; exit 0; fi
    # A lease not touched for longer than a takeover waits: no supervisor runs the
    # run any more (its task was replaced or lost with its host): nothing to wait for.
    age=$(( $(date +%s) - $(stat -c %Y @RUN_DIR@/lease 2>/dev/null || echo 0) ))
    if [ "$age" -gt @LEASE_EXPIRED_S@ ]; then
      echo "stop: the run's lease is ${age}s old: no supervisor runs it; nothing to wait for"
      exit 0
    fi
    sleep 1
  done
  echo "stop: the run's supervisor did not end in @ELSEWHERE_WAIT_S@s (see its launcher.log)" >&2
  exit 1
fi
#@end
[ -n "$ctr" ] || { echo "stop: no task of @SERVICE@ here; nothing to stop"; exit 0; }
#@if stop_marker
docker exec -u @TRAIN_UID@ "$ctr" touch @STOP@ || true
#@end
#@if universal
docker exec "$ctr" pkill -KILL -f @UNIVERSAL_PROGRAM@ || true
#@end
#@if follow
docker exec "$ctr" pkill -KILL -f @SUPERVISOR_PREFIX@ || true
docker exec "$ctr" pkill -KILL -f @FOLLOW_PROGRAM@ || true
#@if takeover
docker exec "$ctr" pkill -KILL -f @TAKEOVER_PROGRAM@ || true
#@end
#@end
#@if ranks_of_script
ranks() {
  docker exec -i -e @SCRIPT_ENV@=@PATTERN@ "$ctr" @IMAGE_PYTHON@ -I -S - "$1" <<'DSS_RANKS' 2>/dev/null || echo "?"
@RANKS_PROGRAM@
DSS_RANKS
}
#@end
#@if command_ranks
#@if everywhere
hosts=$(docker exec "$ctr" cat @HOSTFILE@ | awk 'NF {printf "%s%s", s, $1; s = ","}')
ranks() {
  [ -n "$hosts" ] || { echo "?"; return; }
  docker exec -u @TRAIN_UID@ -e @PDSH_SSH_ARGS@ "$ctr" pdsh -S -t 5 -u @PDSH_TIMEOUT_S@ -w "$hosts" @PDSH_COMMAND@"$1" 2>/dev/null |
    awk -F': ' '$2 ~ /^[0-9]+$/ {n += $2; k++} END {if (k) print n; else print "?"}'
}
#@else
ranks() {
  docker exec -e @RANKS_ENV@ "$ctr" @IMAGE_PYTHON@ -S -E @COMMAND_RANKS@ "$1" 2>/dev/null || echo "?"
}
#@end
#@end
n=$(ranks term)
case "$n" in
  ''|*[!0-9]*)
    echo "stop: cannot tell the ranks apart ($n); SIGTERM to all of the training" >&2
    docker exec "$ctr" pkill -TERM -f @PATTERN@ || true ;;
  *) echo "stop: SIGTERM to $n rank(s)" ;;
esac
idle=0
end=$(($(date +%s) + @GRACE_SECONDS@))
while [ "$(date +%s)" -lt "$end" ]; do
  if ! docker exec "$ctr" pgrep -f @PATTERN@ >/dev/null 2>&1; then
    echo "stop: training exited"
    exit 0
  fi
  if [ "$(ranks count)" = 0 ]; then idle=$((idle + 1)); else idle=0; fi
  if [ "$idle" -eq @LAUNCHERS_AFTER_S@ ]; then  # about that many seconds: one round each
    echo "stop: no rank left; SIGTERM to the launchers"
    docker exec "$ctr" pkill -TERM -f @PATTERN@ || true
  fi
  sleep 1
done
echo "stop: still running after @GRACE_SECONDS@s (blocked: a peer is gone?); SIGKILL" >&2
#@if everywhere
#@ Under pdsh the pattern reaches the master's processes only: the other hosts' ranks
#@ get their SIGKILL from commandranks.py too.
ranks kill >/dev/null
#@end
docker exec "$ctr" pkill -KILL -f @PATTERN@ || true
