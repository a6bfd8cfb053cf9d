#@ A launch's environment (POSIX sh), rendered by infra/render/command.py env_setup:
#@ the block @SETUP@ of infra/task/supervisor.sh, run once before the supervisor's
#@ loop. It makes the run's directories and hands the launch's environment file
#@ (@ENV_FILE@, KEY=VALUE lines as DeepSpeed's runner reads .deepspeed_env) to the
#@ ranks, so they see the same values under every launcher. Its bytes are part of the
#@ launch script, a resource input: a byte changed is an update of every launch (the
#@ idempotent script keeps a running run; the supervisor's next start reads it).
#@
#@ Parts:  ds_env_file  under pdsh with the deepspeed launcher: DeepSpeed's runner
#@                      exports the file on every node it reaches through pdsh
#@                      (DS_ENV_FILE, an absolute path it reads as it is).
#@ Whatever the launcher, the supervisor exports each line itself too, as the runner
#@ would: DeepSpeed's runner reads the file only when its hostfile spans more than one
#@ node, and runs a one-node hostfile's ranks with its own environment.
mkdir -p @DIRS@
#@if ds_env_file
export DS_ENV_FILE=@ENV_FILE@
#@end
#@ Not under `set -u`: a value may name a variable the node does not have, which
#@ DeepSpeed's remote shell expands to nothing.
set +u
while IFS= read -r dss_line || [ -n "$dss_line" ]; do
  eval "export ${dss_line%%=*}=\"${dss_line#*=}\""
done <@ENV_FILE@
set -u
