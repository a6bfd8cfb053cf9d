"""deepspeed-swarm policy pack: `pulumi preview --policy-pack policy
--policy-pack-config policy/config/<stack>.json` (rules in policy/rules.py).

The policy host runs this file from policy/, where `policy.rules` and `infra` are not
importable by themselves: the project root is on PYTHONPATH instead (scripts/env.sh
for local runs and the engine tests, scripts/ci/setup-env for the workflows).
"""

from pulumi_policy import EnforcementLevel, PolicyPack

from policy.rules import POLICIES

# Advisory unless the stack's config file says otherwise ("all": "mandatory" on prod).
PolicyPack(
    name="deepspeed-swarm",
    enforcement_level=EnforcementLevel.ADVISORY,
    policies=list(POLICIES),
)
