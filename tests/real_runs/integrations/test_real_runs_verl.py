"""The verl parts that run without a cluster: batch -> Feedback, and the curriculum
sampler's order of select / draw / update."""
from types import SimpleNamespace

import numpy as np
import pytest

from policies import make
from policies.errors import UserError
from real_runs.trl_verl import HarnessCurriculumCore, verl_feedback

H = ["json", "xml", "kv"]


def _batch(scores, uid, harness, meta=None):
    # token-level scores: the outcome reward sits on the last response token (verl's layout)
    tokens = np.zeros((len(scores), 3))
    tokens[:, -1] = scores
    return SimpleNamespace(batch={"token_level_scores": tokens}, meta_info=meta or {},
                           non_tensor_batch={"uid": np.asarray(uid, dtype=object),
                                             "harness": np.asarray(harness, dtype=object)})


def test_verl_feedback_hand_computed():
    # rows interleaved as verl may leave them; group a = (1, 0, 0, 0): LOO mean |A| = 0.5;
    # group b = (1, 1, 1, 1) has no variance and is left out of L
    b = _batch([1, 1, 0, 1, 0, 1, 0, 1], ["a", "b", "a", "b", "a", "b", "a", "b"], ["xml"] * 8,
               {"hb_sketch": [3.0, 4.0]})
    fb = verl_feedback(b, H)
    assert fb.arm == 1 and fb.counts.tolist() == [0, 2, 0]
    assert fb.learnability == pytest.approx(0.5)
    assert fb.reward == pytest.approx(5 / 8)
    assert fb.sketch.dtype == np.float32 and fb.sketch.tolist() == [3.0, 4.0]
    mixed = verl_feedback(_batch([1, 0, 1, 1], ["a", "a", "b", "b"], ["json", "json", "kv", "kv"]), H)
    assert mixed.arm is None and mixed.counts.tolist() == [1, 0, 1] and mixed.sketch is None
    assert mixed.learnability == pytest.approx(1.0)   # G = 2: A = (1, -1)


def test_verl_feedback_rejects_bad_batches():
    with pytest.raises(UserError, match="group sizes"):
        verl_feedback(_batch([1, 0, 1], ["a", "a", "b"], ["xml"] * 3), H)
    with pytest.raises(UserError, match="harness='react'"):
        verl_feedback(_batch([1, 0], ["a", "a"], ["react"] * 2), H)


def test_curriculum_core_selects_after_each_update():
    column = ["json"] * 4 + ["xml"] * 4 + ["kv"] * 4
    core = HarnessCurriculumCore(column, H, make("round_robin", n_arms=3, seed=0), batch_groups=2, steps=3)
    it = iter(core)
    seen = []
    for step in range(3):
        rows = [next(it), next(it)]
        name = column[rows[0]]
        assert {column[r] for r in rows} == {H[step]} == {name}
        scores = [1, 0, 0, 0, 1, 1, 0, 0]
        seen.append(core.update(_batch(scores, ["a"] * 4 + ["b"] * 4, [name] * 8)))
    assert [fb.arm for fb in seen] == [0, 1, 2] and core.policy.t == 3
    assert len(core) == 6 and core.pending == []
    core2 = HarnessCurriculumCore(column, H, make("round_robin", n_arms=3, seed=0), batch_groups=2, steps=3)
    core2.load_state_dict(core.state_dict())
    assert core2.policy.state_dict()["t"] == 3
    with pytest.raises(UserError, match="before the sampler drew"):
        core.update(_batch([1, 0], ["a", "a"], ["xml", "xml"]))
    core3 = HarnessCurriculumCore(column, H, make("round_robin", n_arms=3, seed=0), batch_groups=2, steps=3)
    ahead = iter(core3)
    rows = [next(ahead) for _ in range(3)]      # a prefetching loader: step 2's first index before step 1's feedback
    with pytest.raises(UserError, match="dataloader_num_workers=0"):
        core3.update(_batch([1, 0, 0, 1], ["a", "a", "b", "b"], [column[rows[0]]] * 4))


def test_sampler_builds_from_a_verl_like_config():
    from real_runs.trl_verl import HarnessCurriculumSampler
    data = SimpleNamespace(dataframe={"harness": ["json", "xml", "kv", "xml"]})
    cfg = {"train_batch_size": 2, "harnessbandit": {"harnesses": H, "policy": "mixed", "steps": 2}}
    sampler = HarnessCurriculumSampler(data, cfg)
    first = [next(iter(sampler)) for _ in range(1)]
    assert len(sampler) == 4 and sampler.policy.name == "mixed" and first[0] in range(4)
    with pytest.raises(UserError, match="required"):
        HarnessCurriculumSampler(data, {"train_batch_size": 2})
