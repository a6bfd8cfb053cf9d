"""Programs that run inside a training task, not in Pulumi: the launch script writes
their text beside the hostfile and the task's own `python3` runs them. Standard
library only (the image has nothing else they may rely on), and nothing from the rest
of `infra` (they are shipped as one file each): unit tests import them directly.

Beside them, the shell scripts that run on the hosts and in the tasks, as templates:
launch.sh, stop.sh, supervisor.sh, envsetup.sh and takeoverloop.sh, each rendered by
infra/render/template.py from the values its renderer in infra/render/ works out.
"""
