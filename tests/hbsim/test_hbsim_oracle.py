"""The env side of the clairvoyant references: `target_gains` (the optional adapter method),
the loop handing it to `oracle`, and the refusal where a trainer has none."""
import numpy as np
import pytest

import hbsim
from hbsim.cli import main
from hbsim.envs import make_env
from hbsim.envs.base import TARGETS, target_means
from hbsim.adapter import step_feedback
from hbsim.loop import Loop
from policies import make
from policies.errors import UserError

TINY = dict(n_harnesses=2, n_tasks=1, n_heldout_tasks=1, group_size=2, drift=0.0, n_saturating=0, n_zero=0)


def _sig(x):
    return 1.0 / (1.0 + np.exp(-x))


def _tiny_env():
    """The first seed whose one training task and one held-out task share a category (so the
    competence step reaches the held-out task)."""
    for seed in range(50):
        env = make_env("bernoulli", seed=seed, **TINY)
        if env.task_category[0] == env.task_category[1]:
            return env
    raise AssertionError("no seed with one category")


def test_target_gains_by_hand_on_a_tiny_env():
    # G = 2, LOO, one task: E[sig] = p(1-p), keep = 2p(1-p), so every retained group carries
    # signal 1/2 and a pure step on h moves competence by lr/2 * M[h, :] and the task skill by
    # task_lr/2 (training task only).
    env = _tiny_env()
    k, L, M, ceil, H = env.knobs, env._logits(), env.M, env.ceil, 2
    dz = 0.5 * k["lr"] * M                                    # (H, H+1): row h = a pure step on h
    want = {
        "train": [np.mean(ceil[:H] * (_sig(L[0, :H] + dz[h, :H] + 0.5 * k["task_lr"]) - _sig(L[0, :H])))
                  for h in range(H)],
        "heldout_tasks": [np.mean(ceil[:H] * (_sig(L[1, :H] + dz[h, :H]) - _sig(L[1, :H]))) for h in range(H)],
        "heldout_harness": [_sig(L[1, H] + dz[h, H]) - _sig(L[1, H]) for h in range(H)],
    }
    pure = np.eye(H, dtype=np.int64) * 8
    for target in TARGETS:
        np.testing.assert_allclose(env.target_gains(pure, target), want[target], rtol=1e-9, atol=1e-15)
        pol = make("oracle", n_arms=H, target=target)
        pol.attach_ground_truth(env.target_gains)
        assert pol.select(batch_groups=8).arm == int(np.argmax(want[target]))
    with pytest.raises(UserError, match="target='test' is not allowed"):
        env.target_gains(pure, "test")


@pytest.mark.parametrize("kind", ["bernoulli", "drifting", "student"])
def test_train_target_agrees_with_expected_success(kind):
    env = make_env(kind, seed=1, n_tasks=30, n_heldout_tasks=6)
    cand = np.vstack([np.eye(6, dtype=np.int64) * 8, [[2, 2, 1, 1, 1, 1]]])
    for _ in range(3):
        env.train_step(make("uniform", n_arms=6).select())
    before = env.success_matrix().copy()
    means = target_means(env.expected_success(cand), env.n_tasks, 6) - target_means(before, env.n_tasks, 6)
    for i, target in enumerate(TARGETS):
        np.testing.assert_allclose(env.target_gains(cand, target), means[:, i], rtol=1e-7, atol=1e-12)
    np.testing.assert_array_equal(env.success_matrix(), before)        # the state is not changed


def _choices(target: str, steps: int = 12, seed: int = 2) -> list[int]:
    """The oracle's arms step by step, each checked against the env's own argmax."""
    env = make_env("bernoulli", seed=seed, n_tasks=40, n_heldout_tasks=10)
    pol = make("oracle", n_arms=6, target=target)
    pol.attach_ground_truth(env.target_gains)
    arms = []
    for _ in range(steps):
        best = int(np.argmax(env.target_gains(np.eye(6, dtype=np.int64) * 8, target)))
        alloc = pol.select(batch_groups=8)
        assert alloc.arm == best
        pol.update(step_feedback(alloc, env.train_step(alloc)))
        arms.append(alloc.arm)
    return arms


def test_targets_switch_the_choice():
    by_target = {t: _choices(t) for t in TARGETS}
    assert by_target["train"] != by_target["heldout_harness"]
    assert len({tuple(v) for v in by_target.values()}) >= 2


def test_loop_oracle_train_matches_the_oracle_arm_extra():
    env = make_env("bernoulli", seed=0, n_tasks=40, n_heldout_tasks=5)
    res = hbsim.run(make("oracle", n_arms=6), env, 10, seed=0)
    assert (res.train["arm"] == res.train["oracle_arm"]).all()
    assert (res.train["regret"] == 0.0).all()


class NoTruth:
    """An adapter without ground truth (like the real trainer): the env minus target_gains."""

    def __init__(self, env):
        self._env, self.harnesses = env, env.harnesses

    def train_step(self, allocation):
        return self._env.train_step(allocation)

    def evaluate(self):
        return self._env.evaluate()

    def config(self):
        return self._env.config()

    def state_dict(self):
        return self._env.state_dict()

    def load_state_dict(self, state):
        self._env.load_state_dict(state)


def test_loop_refuses_oracle_without_ground_truth_before_any_step():
    env = make_env("bernoulli", seed=0, n_tasks=20, n_heldout_tasks=5)
    with pytest.raises(UserError, match="policy='oracle' is not allowed here: it needs the environment's "
                                        "ground truth"):
        Loop(make("oracle", n_arms=6), NoTruth(env))
    assert env.step_count == 0
    res = hbsim.run(make("fixed", n_arms=6, arm=3), NoTruth(env), 3)     # fixed needs none
    assert res.train["arm"].tolist() == [3, 3, 3]


def test_hb_real_refuses_oracle_with_one_line(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["real", "--policy", "oracle", "--steps", "1", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs the environment's ground truth" in err
    assert not out.exists()


def test_hb_sim_runs_the_references(capsys):
    assert main(["sim", "--env", "bernoulli", "--policy", "oracle", "--policy", "fixed", "--seeds", "1",
                 "--steps", "3", "--jobs", "1", "--set", "policy.target=heldout_harness",
                 "--set", "policy.arm=2"]) == 0
    out = capsys.readouterr().out
    assert "oracle" in out and "fixed" in out
