"""Checks of a run's train table shared by the env and loop tests."""
from __future__ import annotations

import numpy as np


def check_regret(train) -> None:
    """The `regret` column (best pure one-step gain minus the chosen allocation's, from the
    pre-step state: `hbsim.envs.base.SyntheticEnv`) is finite and >= 0, exactly 0 on every
    pure step that chose the oracle's arm (a wrong sign, a NaN or a regret charged to the
    best arm fails; the exact value is checked against the pre-step gains in the env tests)."""
    r = train["regret"].to_numpy(dtype=float)
    assert np.isfinite(r).all() and (r >= 0).all(), r
    arm, oracle = train["arm"].to_numpy(), train["oracle_arm"].to_numpy()
    pure = arm >= 0
    assert (r[pure & (arm == oracle)] == 0).all(), "picking the oracle's arm costs nothing"
