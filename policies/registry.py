"""Name -> policy class (`POLICIES`), and `make`."""
from __future__ import annotations

from policies.base import Policy
from policies.bandits import UCB1, DiscountedTS, Exp3S, RankPrioritised
from policies.clairvoyant import Fixed, Oracle
from policies.mixed import Mixed
from policies.published import SEC, TAC, SuccessVariance
from policies.scored import LearnabilityOnly, MinFusion, ProductFusion, ScoredPolicy, TransferOnly
from policies.simple import RoundRobin, Uniform
from policies.errors import UserError

POLICIES: dict[str, type[Policy]] = {
    cls.name: cls
    for cls in (Uniform, RoundRobin, LearnabilityOnly, TransferOnly, ScoredPolicy, ProductFusion, MinFusion, Mixed,
                Exp3S, UCB1, DiscountedTS, RankPrioritised, SEC, SuccessVariance, TAC, Oracle, Fixed)
}

#: The eight designs of the paper's comparison (SPEC §4 table + `min`); the rest are beyond the paper.
PAPER_POLICIES = ("uniform", "round_robin", "learnability", "transfer", "harnessbandit", "product", "min", "mixed")
#: the clairvoyant references (policies.clairvoyant): bounds, not designs (`Policy.reference`)
REFERENCE_POLICIES = tuple(name for name, cls in POLICIES.items() if cls.reference)

#: the published schedulers HarnessBandit is compared with (policies.published)
PUBLISHED_POLICIES = ("sec", "variance", "tac")


def make(name: str, n_arms: int, seed: int = 0, **knobs) -> Policy:
    """Build a registered policy. Unknown names or knobs raise UserError listing the valid ones.

    `make("harnessbandit", n_arms=6, seed=0, tau=0.1)`; `make("mixed", n_arms=6, arms=[0, 4])`.
    """
    if name not in POLICIES:
        raise UserError(f"policy name={name!r} is unknown; valid names: {', '.join(POLICIES)}")
    return POLICIES[name](n_arms, seed, **knobs)
