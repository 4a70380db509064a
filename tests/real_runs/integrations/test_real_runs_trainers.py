"""The parts of the verl 0.8-0.9 and SkyRL integrations that run without either package: the
supported ranges and the entry points' one-line refusals before verl / SkyRL is imported
(issue 41 cause 9), the v1 trainer's config refusals, the step view both trainers build from
what they hold (hand-computed L through the project's one LOO rule), the sketch-less policy
rule, SkyRL's `harnessbandit.*` arguments and its env_class sampler."""
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from policies.errors import UserError
from real_runs.integrations import skyrl_sampler as sk
from real_runs.integrations import verl_sampler as vs

ROOT = Path(__file__).resolve().parents[3]
H = ["json", "xml", "kv"]
RANGES = "verl >=0.5,<0.10 (0.5-0.7 and 0.8-0.9's legacy trainer, trainer.use_v1=false; 0.9's v1 trainer)"


def test_verl_entry_point_ranges():
    for ok in ("0.5.0", "0.7.1", "0.8.0", "0.8.0.dev", "0.9.0", "0.9.1"):
        assert vs.verl_entry_problem(ok) is None
    for bad in ("0.4.1", "0.10.0", "1.0.0"):
        assert vs.verl_entry_problem(bad) == (f"the verl entry point needs {RANGES}; found verl {bad}: "
                                              "pip install 'harnessbandit[verl]' (docs/VERL.md)")
    assert vs.verl_entry_problem(None) == (f"the verl entry point needs {RANGES}; verl is not installed: "
                                           "pip install 'harnessbandit[verl]'")
    assert vs.version_tuple("0.9.1") == (0, 9) and vs.version_tuple("1") == (1, 0)
    # the data.sampler path stays 0.5-0.7 and names the 0.8+ way
    assert "python -m real_runs.integrations.verl_main" in vs.verl_problem("0.9.1", False)


def _entry(module: str, *args) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, env=env, capture_output=True, text=True)


@pytest.mark.cli
@pytest.mark.slow
def test_entry_points_without_the_package_are_one_line_before_any_import():
    """This environment has neither verl nor skyrl (they live in their own venvs)."""
    assert vs.installed_version("verl") is None and vs.installed_version("skyrl") is None
    proc = _entry("real_runs.integrations.verl_main", "trainer.use_v1=false")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == f"error: the verl entry point needs {RANGES}; verl is not installed: " \
                          "pip install 'harnessbandit[verl]'\n"
    proc = _entry("real_runs.integrations.skyrl_main", "harnessbandit.steps=3")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == ("error: the SkyRL entry point needs skyrl >=0.4,<0.5; skyrl is not installed: "
                           "pip install 'skyrl[fsdp]==0.4.0'\n")


def test_v1_refusals_name_the_setting():
    base = {"trainer": {"v1": {"trainer_mode": "harnessbandit", "sampler": {}}}, "algorithm": {}}
    assert vs.v1_problem(base) is None
    assert vs.v1_problem({"trainer": {"v1": {"trainer_mode": "sync"}}}) is None
    assert vs.v1_problem({}) is None
    for mode in ("colocate_async", "separate_async"):
        msg = vs.v1_problem({"trainer": {"v1": {"trainer_mode": mode}}})
        assert msg.startswith(f"trainer.v1.trainer_mode={mode!r} is not allowed with the harness scheduler")
    msg = vs.v1_problem({**base, "algorithm": {"filter_groups": {"enable": True, "metric": "acc"}}})
    assert msg.startswith("algorithm.filter_groups.enable=true is not allowed")
    assert vs.v1_problem({**base, "algorithm": {"filter_groups": {"enable": False}}}) is None
    refill = {"trainer": {"v1": {"trainer_mode": "sync", "sampler": {"sync_refill_failed_groups": True}}}}
    assert vs.v1_problem(refill).startswith("trainer.v1.sampler.sync_refill_failed_groups=true is not allowed")
    custom = {"trainer": {"v1": {"sampler": {"custom_sampler": {"path": "x.py", "name": "S"}}}}}
    assert vs.v1_problem(custom).startswith("trainer.v1.sampler.custom_sampler is not allowed")
    assert vs.v1_problem({"trainer": {"v1": {"sampler": {"custom_sampler": {"path": None}}}}}) is None


def test_step_view_through_the_one_loo_rule():
    # groups: u1 = (1, 0, 0, 0) -> LOO mean |A| = 1/2; u2 = (1, 1, 0, 0) -> A = (2/3, 2/3, -2/3, -2/3) -> 2/3;
    # u3 = (1, 1, 1, 1) has no variance: L = mean over u1, u2 = 7/12
    scores = [1, 0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 1]
    uids = ["u1"] * 4 + ["u2"] * 4 + ["u3"] * 4
    harness = ["kv"] * 4 + ["json"] * 8
    view = vs.step_view(scores, uids, harness, response_mask=np.full((12, 1), 5))
    alloc, res = vs.verl_result(view, H)
    assert alloc.counts.tolist() == [2, 0, 1]
    assert res.learnability == pytest.approx(7 / 12) and res.cost.groups_retained == 2
    assert res.cost.tokens == 60 and res.reward == pytest.approx(7 / 12) and res.sketch is None
    # SkyRL's env_class column under its own key
    view = vs.step_view(scores[:4], uids[:4], ["kv"] * 4, harness_key="env_class", meta={"hb_sketch": [1.0, 2.0]})
    _, res = vs.verl_result(view, H, harness_key="env_class")
    assert res.learnability == pytest.approx(0.5) and res.sketch.tolist() == [1.0, 2.0]


def test_trajectory_rows_merge_and_sketch_pop():
    keys = ["a_0_0", "a_0_1", "a_1_0", "b_0_0", "b_1_0", "b_1_1", "a_b_0_0"]
    assert vs.trajectory_rows(keys) == [0, 2, 3, 4, 6]
    v1 = vs.step_view([1, 0], ["a", "a"], ["kv", "kv"], response_mask=np.ones((2, 1)))
    v2 = vs.step_view([1, 1], ["b", "b"], ["xml", "xml"], response_mask=np.ones((2, 1)), meta={"hb_sketch": [1.0]})
    both = vs.merge_views([v1, v2])
    assert both.batch["token_level_scores"].tolist() == [1, 0, 1, 1]
    assert both.non_tensor_batch["uid"].tolist() == ["a", "a", "b", "b"] and both.meta_info == {"hb_sketch": [1.0]}
    assert vs.merge_views([v1]) is v1
    meta = {}
    out = {"metrics": {"loss": [0.1], "hb_sketch": [[3.0, 4.0], [3.0, 4.0]]}}
    vs.take_update_sketch(out, meta)
    assert out["metrics"] == {"loss": [0.1]} and meta["hb_sketch"].tolist() == [3.0, 4.0]
    vs.take_update_sketch({"metrics": {"loss": 1}}, meta)
    assert meta["hb_sketch"].tolist() == [3.0, 4.0]


def test_policies_without_a_sketch():
    data = SimpleNamespace(dataframe={"harness": H * 2})
    hb = {"harnesses": H, "steps": 2}
    for policy, knobs in (("transfer", {}), ("harnessbandit", {"fusion": "transfer"})):
        with pytest.raises(UserError) as err:
            vs.HarnessCurriculumCore.from_config(data, {"train_batch_size": 1, "harnessbandit": {
                **hb, "policy": policy, "policy_knobs": knobs}}, "verl's v1 trainer")
        assert str(err.value).startswith(f"policy={policy!r} is not allowed in verl's v1 trainer without a gradient "
                                         "sketch: it scores T only")
    ok = vs.HarnessCurriculumCore.from_config(data, {"train_batch_size": 1, "harnessbandit": {
        **hb, "policy": "transfer", "sketch": True}})
    assert ok.policy.name == "transfer"
    for policy in ("harnessbandit", "learnability", "sec", "tac", "uniform", "product"):
        vs.HarnessCurriculumCore.from_config(data, {"train_batch_size": 1, "harnessbandit": {**hb, "policy": policy}})
    with pytest.raises(UserError, match=r"^data\.harnessbandit\.harnesses and data\.harnessbandit\.steps are required"):
        vs.HarnessCurriculumCore.from_config(data, {"train_batch_size": 1, "harnessbandit": {"steps": 2}})


def test_skyrl_ranges_arguments_and_refusals():
    assert sk.skyrl_problem("0.4.0") is None and sk.skyrl_problem("0.4.7", (3, 13)) is None
    assert sk.skyrl_problem("0.4.0", (3, 11)) == ("skyrl 0.4.0 needs Python >= 3.12 (its pydantic models use 3.12's "
                                                  "typing.TypedDict); this is Python 3.11")
    assert sk.skyrl_problem("0.3.0") == "the SkyRL entry point needs skyrl >=0.4,<0.5; found skyrl 0.3.0 (docs/SKYRL.md)"
    assert "not installed" in sk.skyrl_problem(None)
    settings, rest = sk.split_arguments(["trainer.epochs=1", "harnessbandit.harnesses=[a,b]", "+harnessbandit.steps=4",
                                         "harnessbandit.policy_knobs.tau=0.2", "harnessbandit.policy=sec",
                                         "environment.env_class=gsm8k"])
    assert settings == {"harnesses": ["a", "b"], "steps": 4, "policy_knobs": {"tau": 0.2}, "policy": "sec"}
    assert rest == ["trainer.epochs=1", "environment.env_class=gsm8k"]
    with pytest.raises(UserError, match=r"^argument 'harnessbandit.steps' is not allowed: expected harnessbandit.NAME"):
        sk.split_arguments(["harnessbandit.steps"])
    with pytest.raises(UserError, match=r"has no knob 'stepz'; valid knobs: harnesses, steps"):
        vs.SKYRL_KNOBS.settings({"stepz": 3})
    assert sk.dynamic_sampling_problem(None) is None
    assert sk.dynamic_sampling_problem("filter").startswith(
        "trainer.algorithm.dynamic_sampling.type='filter' is not allowed with the harness scheduler: it draws several")


def test_skyrl_sampler_over_env_class_and_its_view():
    data = SimpleNamespace(dataframe={"env_class": ["gsm8k", None, "search", "gsm8k", None, "search"]})
    core = sk.make_sampler(data, {"harnesses": ["gsm8k", "search", "text"], "steps": 2, "policy": "round_robin"},
                           batch_size=2, default_env="text")
    assert core.env_class == ["gsm8k", "text", "search", "gsm8k", "text", "search"]
    it = iter(core)
    rows = [next(it), next(it)]
    assert {core.env_class[r] for r in rows} == {"gsm8k"}          # round_robin: arm 0 first
    # SkyRL's batch: token rewards (rows, T), uids = dataset row index, one padding row
    uids = [str(rows[0])] * 2 + [str(rows[1])] * 2 + ["0"]
    rewards = np.zeros((5, 3))
    rewards[:, -1] = [1, 0, 1, 1, 9]
    view = sk.skyrl_view(core, rewards, uids, np.ones((5, 3)), pad_size=1)
    row = core.update(view)
    assert row["learnability"] == pytest.approx(1.0) and row["groups_retained"] == 1 and row["tokens"] == 12
    assert row["alloc_gsm8k"] == 2
    with pytest.raises(UserError, match="has no 'env_class' column"):
        sk.make_sampler(SimpleNamespace(dataframe={"prompt": ["x"]}), {"harnesses": ["a"], "steps": 1}, batch_size=1)
    with pytest.raises(UserError, match=r"^harnessbandit\.harnesses and harnessbandit\.steps are required by the SkyRL"):
        sk.make_sampler(data, {"steps": 1}, batch_size=1)
