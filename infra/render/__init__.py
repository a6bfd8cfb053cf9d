"""Pure renderers: config (and observed task rosters) in, strings and spec inputs out.

By concern: `labels` (node labels, placement, task environment), `launch` (roster
order, hostfile, rank map, launcher lines, launch and stop scripts), `specs` (the
Swarm spec builders services share), `prometheus` (monitoring's configuration),
`digest` (content hashes). Code under infra/ imports the submodules.
"""
