"""The verl parts that run without a cluster: batch -> allocation and StepResult (the
policy's Feedback through hbsim.adapter.step_feedback), the curriculum sampler's order of
select / draw / update, and its SPEC §7 train rows."""
from types import SimpleNamespace

import numpy as np
import pytest

from hbsim.adapter import step_feedback
from policies import make
from policies.errors import UserError
from real_runs.integrations.verl_sampler import HarnessCurriculumCore, verl_result

from_config = HarnessCurriculumCore.from_config

H = ["json", "xml", "kv"]


def _batch(scores, uid, harness, meta=None):
    # token-level scores: the outcome reward sits on the last response token (verl's layout)
    tokens = np.zeros((len(scores), 3))
    tokens[:, -1] = scores
    return SimpleNamespace(batch={"token_level_scores": tokens}, meta_info=meta or {},
                           non_tensor_batch={"uid": np.asarray(uid, dtype=object),
                                             "harness": np.asarray(harness, dtype=object)})


def verl_feedback(batch, harnesses):
    return step_feedback(*verl_result(batch, harnesses))


def test_verl_feedback_hand_computed():
    # rows interleaved as verl may leave them; group a = (1, 0, 0, 0): LOO mean |A| = 0.5;
    # group b = (1, 1, 1, 1) has no variance and is left out of L
    b = _batch([1, 1, 0, 1, 0, 1, 0, 1], ["a", "b", "a", "b", "a", "b", "a", "b"], ["xml"] * 8,
               {"hb_sketch": [3.0, 4.0]})
    fb = verl_feedback(b, H)
    assert fb.arm == 1 and fb.counts.tolist() == [0, 2, 0]
    assert fb.learnability == pytest.approx(0.5)
    assert fb.reward == pytest.approx(5 / 8)
    assert fb.sketch.dtype == np.float32 and fb.sketch.tolist() == [3.0, 4.0] and fb.cost == 1.0
    alloc, res = verl_result(b, H)
    c = res.cost
    assert (c.groups_generated, c.groups_retained, c.groups_optimized, c.tokens) == (2, 1, 2, 0)
    masked = _batch([1, 0, 0, 0], ["a"] * 4, ["xml"] * 4, {"hb_groups_generated": 3})
    masked.batch["response_mask"] = np.ones((4, 3))
    _, res = verl_result(masked, H)
    assert res.cost.tokens == 12 and step_feedback(*verl_result(masked, H)).cost == 3.0
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
    assert [row["arm"] for row in seen] == [0, 1, 2] and core.policy.t == 3
    assert len(core) == 6 and core.recorder.pending is None
    core2 = HarnessCurriculumCore(column, H, make("round_robin", n_arms=3, seed=0), batch_groups=2, steps=3)
    core2.load_state_dict(core.state_dict())
    assert core2.policy.state_dict()["t"] == 3
    with pytest.raises(UserError, match="before the sampler drew"):
        core.update(_batch([1, 0], ["a", "a"], ["xml", "xml"]))
    core3 = HarnessCurriculumCore(column, H, make("round_robin", n_arms=3, seed=0), batch_groups=2, steps=3)
    ahead = iter(core3)
    rows = [next(ahead) for _ in range(2)]
    with pytest.raises(UserError, match="dataloader_num_workers=0"):   # a prefetching loader: step 2's first
        next(ahead)                                                     # index before step 1's feedback
    with pytest.raises(UserError, match="differ from the allocation"):
        core3.update(_batch([1, 0, 0, 1], ["a", "a", "b", "b"], [H[(H.index(column[rows[0]]) + 1) % 3]] * 4))


def test_sampler_records_spec_train_rows_with_a_finite_cost():
    column = ["json"] * 4 + ["xml"] * 4 + ["kv"] * 4
    core = HarnessCurriculumCore(column, H, make("harnessbandit", n_arms=3, seed=0), batch_groups=2, steps=2,
                                 label="hb")
    it = iter(core)
    for _ in range(2):
        rows = [next(it), next(it)]
        core.update(_batch([1, 0, 0, 0, 1, 1, 0, 0], ["a"] * 4 + ["b"] * 4, [column[rows[0]]] * 8,
                           {"hb_sketch": [1.0, 2.0, 2.0]}))
    train = core.result().train
    spec = ["run_id", "policy", "seed", "step", "arm", "learnability", "transfer", "l_norm", "t_norm", "score",
            *(f"p_{h}" for h in H), "groups_generated", "groups_retained", "groups_optimized", "tokens",
            "seconds_scheduler", "seconds_step"]
    assert set(spec) <= set(train.columns) and train["step"].tolist() == [1, 2] and (train["policy"] == "hb").all()
    # L = mean over the groups of mean |LOO A|: (1, 0, 0, 0) -> 1/2, (1, 1, 0, 0) -> 2/3
    assert train["arm"].tolist() == [0, 1] and train["learnability"].tolist() == pytest.approx([7 / 12, 7 / 12])
    cost = train["groups_generated"] / train["groups_optimized"]
    assert cost.tolist() == [1.0, 1.0] and train["groups_retained"].tolist() == [2, 2]
    assert np.isfinite(train["transfer"].iloc[1]) and (train["seconds_step"] > 0).all()
    again = HarnessCurriculumCore(column, H, make("harnessbandit", n_arms=3, seed=0), batch_groups=2, steps=2,
                                  label="hb")
    again.load_state_dict(core.state_dict())
    assert again.recorder.t == 2 and len(again.recorder.rows) == 2


def test_sampler_builds_from_a_verl_like_config():
    data = SimpleNamespace(dataframe={"harness": ["json", "xml", "kv", "xml"]})
    cfg = {"train_batch_size": 2, "harnessbandit": {"harnesses": H, "policy": "mixed", "steps": 2}}
    sampler = from_config(data, cfg)
    first = [next(iter(sampler)) for _ in range(1)]
    assert len(sampler) == 4 and sampler.policy.name == "mixed" and first[0] in range(4)
    with pytest.raises(UserError, match=r"required .*\+data\.harnessbandit\.steps=N"):
        from_config(data, {"train_batch_size": 2})
    dapo = from_config(data, {**cfg, "gen_batch_size": 3})    # the dataloader's batch: gen_batch_size prompts
    assert dapo.recorder.batch_groups == 3 and len(dapo) == 6


def test_sampler_refuses_unknown_or_bad_config_keys():
    data = SimpleNamespace(dataframe={"harness": ["json", "xml", "kv", "xml"]})
    hb = {"harnesses": H, "steps": 2}

    def refused(**extra) -> str:
        with pytest.raises(UserError) as info:
            from_config(data, {"train_batch_size": 2, "harnessbandit": {**hb, **extra}})
        return str(info.value)
    msg = refused(polcy="mixed")       # a typo was silently ignored (the policy stayed harnessbandit)
    assert msg.startswith("HarnessCurriculumSampler has no knob 'polcy'; valid knobs: harnesses, steps, policy, ")
    assert "keep_band" in msg and "min_abs_adv" in msg
    assert refused(steps=0) == "data.harnessbandit.steps=0 is not allowed: expected an integer in [1, 1000000]"
    assert refused(seed=-1).startswith("data.harnessbandit.seed=-1 is not allowed: expected an integer in [0, ")
    assert "data.harnessbandit.harnesses=['json', 'json'] is not allowed" in refused(harnesses=["json", "json"])
    assert "data.harnessbandit.harnesses='json' is not allowed" in refused(harnesses="json")
    assert "data.harnessbandit.policy_knobs=3 is not allowed" in refused(policy_knobs=3)
    assert "tau" in refused(policy_knobs={"tau": 0})       # the policy's own check names its knob
    sampler = from_config(data, {"train_batch_size": 2, "harnessbandit": {
        **hb, "harnesses": tuple(H), "policy": "mixed", "seed": 3, "policy_knobs": {"arms": [0, 2]}}})
    assert sampler.policy.name == "mixed" and sampler.harnesses == H


def test_group_filter_shapes_l_and_retained_hand_computed():
    from hbsim.sampling import GroupFilter
    from real_runs.integrations.verl_sampler import keep_rows
    # groups (G = 4): a = 1 success (mean 0.25, mean |LOO A| 1/2), b = 2 (0.5, 2/3), c = 3 (0.75, 1/2),
    # d = 4 (no variance: dropped by every filter)
    scores = [1, 0, 0, 0] + [1, 1, 0, 0] + [1, 1, 1, 0] + [1, 1, 1, 1]
    b = _batch(scores, ["a"] * 4 + ["b"] * 4 + ["c"] * 4 + ["d"] * 4, ["kv"] * 16)
    cases = {GroupFilter(): (5 / 9, 3), GroupFilter("0.3,0.8"): (7 / 12, 2), GroupFilter("0.25,0.5"): (7 / 12, 2),
             GroupFilter(min_abs_adv=0.55): (2 / 3, 1), GroupFilter("0.9,1.0"): (None, 0)}
    for filt, (learn, retained) in cases.items():
        _, res = verl_result(b, H, group_filter=filt)
        assert res.cost.groups_retained == retained and res.cost.groups_optimized == 4, filt
        assert res.learnability == (None if learn is None else pytest.approx(learn)), filt
    assert verl_result(b, H)[1].learnability == pytest.approx(5 / 9)      # no filter = the default filter
    assert keep_rows(b, GroupFilter("0.3,0.8")).tolist() == [False] * 4 + [True] * 8 + [False] * 4
    assert keep_rows(b, GroupFilter()).tolist() == [True] * 12 + [False] * 4


def test_sampler_takes_the_filter_knobs_from_its_config():
    from hbsim.sampling import GroupFilter
    data = SimpleNamespace(dataframe={"harness": ["json", "xml", "kv", "kv"]})
    hb = {"harnesses": H, "policy": "uniform", "steps": 1, "keep_band": [0.3, 0.8], "min_abs_adv": 0.1}
    sampler = from_config(data, {"train_batch_size": 2, "harnessbandit": hb})
    assert sampler.filter == GroupFilter("0.3,0.8", 0.1, "loo")
    rows = list(sampler)
    arm = H.index(data.dataframe["harness"][rows[0]])
    row = sampler.update(_batch([1, 0, 0, 0, 1, 1, 0, 0], ["a"] * 4 + ["b"] * 4, [H[arm]] * 8))
    assert row["groups_retained"] == 1 and row["learnability"] == pytest.approx(2 / 3)    # only b is in the band
    plain = from_config(data, {"train_batch_size": 2, "harnessbandit": {**hb, "keep_band": ""}})
    assert plain.filter == GroupFilter("", 0.1, "loo")
    with pytest.raises(UserError, match="keep_band"):
        from_config(data, {"train_batch_size": 2, "harnessbandit": {**hb, "keep_band": [0.8, 0.3]}})
    with pytest.raises(UserError, match="min_abs_adv"):
        from_config(data, {"train_batch_size": 2, "harnessbandit": {**hb, "min_abs_adv": -1}})


def test_supported_verl_range_and_the_refusal_without_it():
    from real_runs.integrations import verl_sampler
    from real_runs.integrations.verl_sampler import HarnessCurriculumSampler, verl_problem
    assert verl_problem("0.5.0", True) is None and verl_problem("0.7.1", True) is None
    assert verl_problem("0.6.1.post1", True) is None
    for version in ("0.4.1", "0.8.0", "0.8.0.dev", "0.9.1", "1.0.0"):
        msg = verl_problem(version, True)
        assert msg.startswith("HarnessCurriculumSampler needs verl >=0.5,<0.8 ") and f"found verl {version}:" in msg
    assert "found verl 0.7.1" in verl_problem("0.7.1", False)      # a build without AbstractCurriculumSampler
    assert "not installed" in verl_problem(None, False)
    if verl_sampler._verl is None:          # this process has no verl: the class refuses, no plain-object fallback
        data = SimpleNamespace(dataframe={"harness": ["json", "xml", "kv", "xml"]})
        with pytest.raises(UserError, match=r"needs verl >=0\.5,<0\.8, which is not installed"):
            HarnessCurriculumSampler(data, {"train_batch_size": 2, "harnessbandit": {"harnesses": H, "steps": 2}})


def _default_path_batch(scores, uid, harness, key="harness"):
    """The non-tensor keys a step's batch holds after verl 0.6/0.7's default agent-loop path:
    `_get_gen_batch` keeps only data_source, reward_model, extra_info and uid (the dataset's
    other columns never come back); extra_info is a dict per row."""
    tokens = np.zeros((len(scores), 3))
    tokens[:, -1] = scores
    extra = np.empty(len(scores), dtype=object)
    extra[:] = [{key: h, "index": i} for i, h in enumerate(harness)]
    return SimpleNamespace(batch={"token_level_scores": tokens}, meta_info={}, non_tensor_batch={
        "data_source": np.asarray(["gsm8k"] * len(scores), dtype=object), "extra_info": extra,
        "reward_model": np.asarray([{"ground_truth": "1"}] * len(scores), dtype=object),
        "uid": np.asarray(uid, dtype=object)})


def test_harness_from_what_survives_verls_gen_batch():
    from real_runs.integrations.verl_sampler import harness_names
    b = _default_path_batch([1, 0, 0, 0, 1, 1, 0, 1], ["a"] * 4 + ["b"] * 4, ["kv"] * 4 + ["json"] * 4)
    alloc, res = verl_result(b, H)
    assert alloc.counts.tolist() == [1, 0, 1] and res.learnability == pytest.approx((1 / 2 + 1 / 2) / 2)
    # data_source is the fallback when extra_info lacks the key (here it names a harness)
    b2 = _default_path_batch([1, 0], ["a", "a"], ["kv", "kv"], key="other")
    b2.non_tensor_batch["data_source"] = np.asarray(["xml", "xml"], dtype=object)
    assert verl_result(b2, H)[0].counts.tolist() == [0, 1, 0]
    table = {"data_source": ["xml", "kv", "json"], "extra_info": [{"harness": "kv"}, {}, {"harness": None}],
             "harness": ["json", "json", "xml"]}
    assert harness_names(table) == ["kv", "json", "xml"]      # extra_info, then the column, then data_source
    assert harness_names({"data_source": ["xml", "kv"], "extra_info": [{}, {}]}) == ["xml", "kv"]
    with pytest.raises(UserError, match="names no harness"):
        harness_names({"extra_info": [{}]}, n=1)
    b3 = _default_path_batch([1, 0], ["a", "a"], ["kv", "kv"])
    b3.non_tensor_batch["data_source"] = np.asarray(["gsm8k", "gsm8k"], dtype=object)
    b3.non_tensor_batch["extra_info"][:] = [{}, {}]
    with pytest.raises(UserError, match="harness='gsm8k' is not allowed"):
        verl_result(b3, H)
    # the dataset side: a verl dataframe whose rows name the harness in extra_info only
    data = SimpleNamespace(dataframe={"data_source": ["gsm8k"] * 3, "extra_info": [{"harness": h} for h in H]})
    core = from_config(data, {"train_batch_size": 1, "harnessbandit": {"harnesses": H, "policy": "round_robin",
                                                                         "steps": 3}})
    first = next(iter(core))
    assert data.dataframe["extra_info"][first]["harness"] == "json"


def test_resume_keeps_step_after_verls_save_then_update_order():
    column = ["json"] * 4 + ["xml"] * 4 + ["kv"] * 4
    scores = [1, 0, 0, 0, 1, 1, 0, 0]

    def step(core, it, early):
        rows = [next(it), next(it)]
        b = _batch(scores, ["a"] * 4 + ["b"] * 4, [column[rows[0]]] * 8)
        if early:
            row = core.record_early(b)
            saved = core.state_dict()          # verl's save comes after the actor update
            assert core.update(b) is row       # the stock update of the same step: the row recorded early
            return saved
        saved = core.state_dict()              # the stock trainer: saved while the step is pending
        core.update(b)
        return saved

    whole = HarnessCurriculumCore(column, H, make("harnessbandit", n_arms=3, seed=1), batch_groups=2, steps=4)
    it = iter(whole)
    states = [step(whole, it, early=True) for _ in range(4)]
    assert list(it) == [] and list(iter(whole)) == []    # a re-entered epoch (total_epochs > 1): no step left
    resumed = HarnessCurriculumCore(column, H, make("harnessbandit", n_arms=3, seed=1), batch_groups=2, steps=4)
    resumed.load_state_dict(states[1])                 # verl's checkpoint of step 2
    assert resumed.recorder.t == 2 and len(resumed) == 8
    it2 = iter(resumed)
    for _ in range(2):
        step(resumed, it2, early=True)
    assert list(it2) == []
    assert [r["arm"] for r in resumed.recorder.rows] == [r["arm"] for r in whole.recorder.rows]
    assert resumed.policy.state_dict()["t"] == whole.policy.state_dict()["t"] == 4
    assert np.array_equal(resumed.policy.probabilities(), whole.policy.probabilities())
    stock = HarnessCurriculumCore(column, H, make("harnessbandit", n_arms=3, seed=1), batch_groups=2, steps=4)
    saved = step(stock, iter(stock), early=False)
    assert saved["pending_step"] == 1
    with pytest.raises(UserError, match="saved during step 1, before its sampler.update.*HarnessRayPPOTrainer"):
        HarnessCurriculumCore(column, H, make("harnessbandit", n_arms=3, seed=1), batch_groups=2,
                              steps=4).load_state_dict(saved)
