"""Name -> policy class, and `make`."""
from __future__ import annotations

from policies.base import Policy
from policies.simple import RoundRobin, Uniform

POLICIES: dict[str, type[Policy]] = {cls.name: cls for cls in (Uniform, RoundRobin)}


def make(name: str, n_arms: int, seed: int = 0, **knobs) -> Policy:
    """Build a registered policy; unknown names or knobs raise ValueError listing valid ones."""
    if name not in POLICIES:
        raise ValueError(f"policy name={name!r} is unknown; valid names: {', '.join(POLICIES)}")
    return POLICIES[name].build(n_arms=n_arms, seed=seed, **knobs)
