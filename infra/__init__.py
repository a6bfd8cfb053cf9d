"""deepspeed-swarm's infrastructure: config, dynamic providers, components, renderers.

`infra.config` is the only config reader. Importing anything under `infra` also
installs the aliases that keep the module paths old states name importable
(infra/providers/legacy.py): the engine's provider process imports `infra` first
when it unpickles a provider.
"""

from infra.providers import legacy

legacy.install()
