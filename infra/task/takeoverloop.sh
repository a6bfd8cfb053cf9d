#@ The master task's command beside its sshd (POSIX sh, `sh -c`), with
#@ training.recovery.follow_master: rendered by infra/render/supervisor.py
#@ takeover_loop into the master service's spec (infra/render/taskspecs.py). Every
#@ @INTERVAL_S@ seconds, once a launch wrote the run's takeover program and settings,
#@ it asks infra/task/takeover.py whether this task should take the run over (which
#@ then runs the supervisor). It ends, and with it the task, when sshd is gone.
#@
#@ Its text names the run only as ${DSS_RUN} (the values are paths with it unexpanded):
#@ the stop's and the launch's pkill/pgrep -f on the run's paths must never match this
#@ loop. Its bytes are part of the service's spec: a byte changed restarts the task.
while pgrep -x sshd >/dev/null; do
  if [ -f "@PROGRAM@" ] && [ -f "@SETTINGS@" ] && [ -d "@LOG_DIR@" ]; then
    python3 "@PROGRAM@" takeover "@SETTINGS@" >>"@LOG@" 2>&1
  fi
  sleep @INTERVAL_S@
done
exit 1
