"""The clairvoyant references `oracle` and `fixed` (policies.clairvoyant), against hand-made
ground truth callables (the env side: tests/hbsim/test_hbsim_oracle.py)."""
import numpy as np
import pytest

from policies import Feedback, POLICIES, make
from policies.errors import UserError
from policies.registry import REFERENCE_POLICIES


class Truth:
    """A linear ground truth: gain = counts @ w / B (+ a bonus for a mixed batch); records calls."""

    def __init__(self, w, mixed_bonus=0.0):
        self.w, self.mixed_bonus, self.calls = np.asarray(w, dtype=float), mixed_bonus, []

    def __call__(self, cand, target):
        self.calls.append((cand.copy(), target))
        gains = cand @ self.w / cand.sum(axis=1)
        return gains + self.mixed_bonus * ((cand > 0).sum(axis=1) > 1)


def test_oracle_takes_the_best_pure_candidate():
    pol = make("oracle", n_arms=3, seed=0)
    truth = Truth([0.1, 0.3, 0.2])
    pol.attach_ground_truth(truth)
    np.testing.assert_array_equal(pol.probabilities(), [0.0, 1.0, 0.0])
    alloc = pol.select(batch_groups=4)
    np.testing.assert_array_equal(alloc.counts, [0, 4, 0])
    assert alloc.arm == 1
    cand, target = truth.calls[-1]
    np.testing.assert_array_equal(cand, np.eye(3, dtype=np.int64) * 4)
    assert target == "train"
    np.testing.assert_allclose(pol.diagnostics()["Q"], [0.1, 0.3, 0.2])
    n_calls = len(truth.calls)
    pol.select(batch_groups=4)                       # the same step: the cached choice, no new call
    assert len(truth.calls) == n_calls


def test_oracle_target_is_passed_and_mixed_candidate():
    pol = make("oracle", n_arms=3, seed=0, target="heldout_harness", with_mixed=True)
    truth = Truth([0.1, 0.3, 0.2], mixed_bonus=0.15)     # mixed: 0.2 + 0.15 > 0.3
    pol.attach_ground_truth(truth)
    alloc = pol.select(batch_groups=8)
    cand, target = truth.calls[-1]
    assert target == "heldout_harness"
    np.testing.assert_array_equal(cand[-1], [3, 3, 2])                 # mixed's split at t = 0
    np.testing.assert_array_equal(alloc.counts, [3, 3, 2])
    assert alloc.arm is None
    pol.update(Feedback(arm=None, counts=alloc.counts))
    np.testing.assert_array_equal(pol.select(batch_groups=8).counts, [3, 2, 3])   # t = 1: the rotation
    np.testing.assert_allclose(pol.probabilities(), [3 / 8, 2 / 8, 3 / 8])


def test_oracle_ties_take_the_lowest_and_nan_is_never_chosen():
    pol = make("oracle", n_arms=3, seed=0)
    pol.attach_ground_truth(lambda cand, target: np.array([np.nan, 0.5, 0.5]))
    assert pol.select(batch_groups=2).arm == 1


def test_oracle_without_ground_truth_and_bad_target():
    pol = make("oracle", n_arms=2, seed=0)
    with pytest.raises(RuntimeError, match="no ground truth"):
        pol.select()
    with pytest.raises(UserError, match="policy.target='test' is not allowed"):
        make("oracle", n_arms=2, target="test")


def test_oracle_state_round_trip_recomputes_from_the_truth():
    a = make("oracle", n_arms=3, seed=0, target="heldout_tasks")
    a.attach_ground_truth(Truth([0.3, 0.1, 0.2]))
    for _ in range(3):
        alloc = a.select(batch_groups=4)
        a.update(Feedback(arm=alloc.arm))
    b = make("oracle", n_arms=3, seed=5, target="heldout_tasks")
    b.attach_ground_truth(Truth([0.1, 0.1, 0.9]))      # another truth: the restored policy asks it again
    b.load_state_dict(a.state_dict())
    assert b.t == 3 and b.state_dict()["visits"].tolist() == [3, 0, 0]
    assert b.select(batch_groups=4).arm == 2
    with pytest.raises(ValueError, match="target"):
        make("oracle", n_arms=3).load_state_dict(a.state_dict())


def test_fixed_arm():
    pol = make("fixed", n_arms=4, seed=0, arm=2)
    for _ in range(3):
        alloc = pol.select(batch_groups=5)
        np.testing.assert_array_equal(alloc.counts, [0, 0, 5, 0])
        pol.update(Feedback(arm=alloc.arm))
    np.testing.assert_array_equal(pol.probabilities(), [0, 0, 1, 0])
    assert pol.diagnostics()["n"].tolist() == [0, 0, 3, 0]
    with pytest.raises(UserError, match=r"policy.arm=4 is not allowed: expected an integer in \[0, 3\]"):
        make("fixed", n_arms=4, arm=4)
    b = make("fixed", n_arms=4, seed=1, arm=2)
    b.load_state_dict(pol.state_dict())
    assert b.t == 3


def test_references_are_marked():
    assert REFERENCE_POLICIES == ("oracle", "fixed")
    assert POLICIES["oracle"].needs_ground_truth and not POLICIES["fixed"].needs_ground_truth
    assert all(not cls.reference and not cls.needs_ground_truth
               for name, cls in POLICIES.items() if name not in REFERENCE_POLICIES)
