#@ The launch (POSIX sh), rendered by infra/render/launch.py launch_script: run over
#@ SSH on a training task's host (the `create` of the launch's command.remote.Command,
#@ its delete is infra/task/stop.sh). It waits for the service's task container to be
#@ healthy, hands it the run's files, and starts the launcher detached as the training
#@ user; an already-running launch is kept (idempotent). Lines starting `#@` are the
#@ template's own (infra/render/template.py): they never reach the host.
#@
#@ Its bytes are the resource's input: a byte changed relaunches every user's run on
#@ upgrade (the old launch's delete stops it first). tests/unit/infra/golden/scripts/
#@ holds every variant the config can produce.
#@
#@ Parts:  supervised        the launcher runs under the run's supervisor
#@                           (infra/task/supervisor.sh, one of the files written)
#@         master_moves      training.recovery.follow_master
#@         forget_host_keys  the host data plane: the master task forgets the host
#@                           keys it learnt (a task that restarted answers at the same
#@                           address with a new key, which accept-new refuses)
#@         check_transport   RDMA declared: wait for NCCL to name its transport; a run
#@                           that fell back to sockets is stopped and fails the launch
#@ @WRITES@ is a block, one line per file the launch hands the task (the hostfile, the
#@ supervisor, the programs of infra/task/ it runs, ...), each replaced whole:
#@   printf %s '<text>' | docker exec -i -u <uid> "$ctr" sh -c '<infra/render/shell.py replace_file>'
#@ @INNER@ is the task's command, one quoted word: `exec sh <supervisor>`, or without
#@ one `mkdir -p <log dir> && cd <workdir> && exec <launcher> >><log> 2>&1`.
set -eu
svc=@SERVICE@
health_fmt='{{if .State.Health}}{{.State.Health.Status}}{{else}}none{{end}}'
ctr=""
for i in $(seq 1 @WAIT_SECONDS@); do
  ctr=$(docker ps -q --filter "label=com.docker.swarm.service.name=$svc" | head -n1)
  if [ -n "$ctr" ]; then
    health=$(docker inspect -f "$health_fmt" "$ctr")
    [ "$health" = healthy ] || [ "$health" = none ] && break
  fi
  sleep 1
done
if [ -z "$ctr" ]; then
  echo "no running task of $svc on $(hostname) after @WAIT_SECONDS@s" >&2
#@if master_moves
#@ The master task may run elsewhere after a takeover.
  echo "training.recovery.follow_master: the master task runs elsewhere since a takeover (docker service ps $svc) and the launch runs where the run was launched; the old run is stopped. Move the master task back (docker node update --availability drain <spare>, then active) and run pulumi up again (docs/run.md)" >&2
#@end
  exit 1
fi
@WRITES@
#@if supervised
#@ A supervisor between two attempts has no launcher: it is the run too.
if docker exec "$ctr" pgrep -f @LAUNCHER@ >/dev/null 2>&1 || docker exec "$ctr" pgrep -f @SUPERVISOR@ >/dev/null 2>&1; then  # idempotent
  echo "launch: $svc on $(hostname) already running; kept"
  exit 0
fi
#@else
if docker exec "$ctr" pgrep -f @LAUNCHER@ >/dev/null 2>&1; then  # idempotent
  echo "launch: $svc on $(hostname) already running; kept"
  exit 0
fi
#@end
#@if forget_host_keys
docker exec -u @TRAIN_UID@ "$ctr" sh -c 'rm -f ~/.ssh/known_hosts'
#@end
#@if supervised
#@ A new launch clears the stop marker a previous stop left; follow_master: and the
#@ run's active file, so its supervisor claims the run with no takeover counted.
#@if master_moves
docker exec -u @TRAIN_UID@ "$ctr" rm -f @ACTIVE@ @STOP@
#@else
docker exec -u @TRAIN_UID@ "$ctr" rm -f @STOP@
#@end
#@end
#@if check_transport
#@ The log's lines before this launch, so that only its own count.
start=$(docker exec "$ctr" sh -c 'grep -c "" @LOG@ 2>/dev/null || true')
#@end
docker exec -d -u @TRAIN_UID@ "$ctr" sh -c @INNER@
echo "launch: started on $(hostname) in $ctr"
#@if check_transport
#@ One read of the log a second; both verdicts are looked for in what it gave. IB
#@ passes; sockets, or an IB that failed to start, stops the training (the stop marker
#@ first, so its supervisor restarts nothing) and fails the launch with NCCL's line,
#@ which names the host and the rank's device. No verdict in time passes with a
#@ warning (NCCL_DEBUG is the stack's to lower; NCCL_NET=IB still makes a fallback
#@ impossible).
for i in $(seq 1 @TRANSPORT_WAIT_S@); do
  new=$(docker exec "$ctr" tail -n +$((start + 1)) @LOG@ 2>/dev/null || true)
  bad=$(printf '%s\n' "$new" | grep -E -m1 @NCCL_BAD@ || true)
  if [ -n "$bad" ]; then
#@if supervised
    docker exec -u @TRAIN_UID@ "$ctr" touch @STOP@
#@end
    docker exec "$ctr" pkill -TERM -f @CHECK_PATTERN@ || true
    echo "launch: RDMA is declared but NCCL did not use it; training stopped. NCCL said: $bad" >&2
    exit 1
  fi
  ok=$(printf '%s\n' "$new" | grep -E -m1 @NCCL_IB@ || true)
  if [ -n "$ok" ]; then echo "launch: NCCL uses IB: $ok"; exit 0; fi
  sleep 1
done
echo "launch: NCCL named no transport within @TRANSPORT_WAIT_S@s (NCCL_DEBUG below INFO?); NCCL_NET=IB allows no fallback" >&2
#@end
