"""deepspeed-swarm policy pack: `pulumi preview --policy-pack policy
--policy-pack-config policy/config/<stack>.json` (rules in policy/rules.py)."""

import sys
from pathlib import Path

from pulumi_policy import EnforcementLevel, PolicyPack

# The pack runs as a script from policy/: make `policy.rules` importable.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from policy.rules import POLICIES

# Advisory unless the stack's config file says otherwise ("all": "mandatory" on prod).
PolicyPack(
    name="deepspeed-swarm",
    enforcement_level=EnforcementLevel.ADVISORY,
    policies=list(POLICIES),
)
