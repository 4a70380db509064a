"""The real-run knob table and its presets (torch-free): one check per knob, preset tables
as `REAL_KNOBS.with_defaults`, cross-knob rules, and config hashes that do not move."""
import dataclasses

import pytest

import real_runs
from hbsim.contract.records import config_hash
from policies.errors import UserError
from real_runs.native.presets import PRESETS, REAL_KNOBS, RealConfig, check, preset_knobs, resolve, resolve_env


@pytest.mark.torch  # real_runs.make_adapter imports the adapter (torch) before it checks the knobs
def test_bad_knobs_raise_naming_the_knob():
    with pytest.raises(UserError, match="no knob 'lrr'; valid knobs: .*lr"):
        real_runs.make_adapter(0, lrr=1.0)
    with pytest.raises(UserError, match="n_harnesses=4"):
        real_runs.make_adapter(0, n_harnesses=4)
    with pytest.raises(UserError, match=r"env.preset='huge' is not allowed: expected one of tiny, cpu-small"):
        real_runs.make_adapter(0, preset="huge")
    with pytest.raises(UserError, match=r"env.kl_coef=-1.0 is out of range: expected a finite number in \[0.0"):
        real_runs.make_adapter(0, kl_coef=-1.0)
    with pytest.raises(UserError, match=r"env.group_size=1 is not allowed: expected an integer in \[2, 1048576\]"):
        resolve(group_size=1)
    with pytest.raises(UserError, match=r"env.device='tpu' is not allowed: expected auto, cpu, cuda or cuda:N"):
        resolve(device="tpu")
    with pytest.raises(UserError, match="env.update_sketch=1 is not allowed: expected true or false"):
        resolve(update_sketch=1)


def test_cross_knob_rules():
    with pytest.raises(UserError, match="env.d_model=66 is not allowed: expected a multiple of n_head=4"):
        resolve(d_model=66)
    with pytest.raises(UserError, match="env.max_new_tokens=80 is not allowed: expected < max_len=80"):
        resolve("gpu-small", max_len=80)
    check(resolve(d_model=68, n_head=4))


def test_a_preset_is_the_table_with_other_defaults():
    gpu = preset_knobs("gpu-small")
    assert list(gpu) == list(REAL_KNOBS) and gpu["d_model"].default == 256 and gpu["preset"].default == "gpu-small"
    assert gpu["d_model"].low == REAL_KNOBS["d_model"].low and REAL_KNOBS["d_model"].default == 64
    cfg = resolve("gpu-small", lr=1)            # an int for a float knob is accepted as a float
    assert isinstance(cfg, RealConfig) and cfg.lr == 1.0 and isinstance(cfg.lr, float)
    assert dataclasses.asdict(cfg) == {**gpu.defaults(), "lr": 1.0}
    assert resolve("tiny", lr=None).lr == 1e-3                 # None keeps the preset's value
    assert {p: PRESETS[p]["batch_groups"] for p in PRESETS} == {"tiny": 2, "cpu-small": 4, "cpu-world": 4,
                                                                "smollm2-135m": 6, "gpu-small": 8}
    assert "batch_groups" not in REAL_KNOBS      # a run-config key: `hb real` takes the preset's as its default
    with pytest.raises(UserError, match="env.warm_tasks=100001 is not allowed"):
        preset_knobs("gpu-small").resolve({"warm_tasks": 100_001})


def test_knob_defaults_keep_the_preset():
    knobs = real_runs.adapter_knobs()
    assert knobs["n_harnesses"] == 6 and knobs["d_model"] is None and knobs["clip_low"] == 0.2
    assert knobs["kl_coef"] is None and knobs["world"] is None     # the smollm2-135m preset sets them
    assert "batch_groups" not in knobs and knobs["preset"] == "tiny"
    merged = {**{k: v for k, v in knobs.items() if k != "n_harnesses"}, "preset": "gpu-small"}
    cfg = real_runs.resolve(**merged)
    assert cfg.d_model == 256 and cfg.sketch_blocks == 4 and cfg.advantage == "loo"


def test_resolved_env_hashes_as_before_the_knob_table():
    """Config hashes of real runs must not move: env sections hashed before REAL_KNOBS existed."""
    pinned = {"tiny": "1e4086063808a972", "cpu-small": "3d53abd34397c68e", "gpu-small": "42696cd734de6834"}
    for preset, digest in pinned.items():
        assert config_hash({"env": resolve_env({"kind": "real", "preset": preset})}) == digest
    assert config_hash({"env": resolve_env({"kind": "real", "lr": 3e-3})}) == "efe481c51edca3a9"


def test_group_filter_knobs_are_real_knobs_recorded_only_when_set():
    from hbsim.sampling import FILTER_KNOBS
    for name, knob in FILTER_KNOBS.items():
        assert REAL_KNOBS[name] == knob
    cfg = resolve(keep_band="0.2,0.8", min_abs_adv=0.1)
    assert (cfg.keep_band, cfg.min_abs_adv) == ("0.2,0.8", 0.1)
    env = resolve_env({"kind": "real", "keep_band": [0.2, 0.8]})
    assert env["keep_band"] == "0.2,0.8" and "min_abs_adv" not in env
    with pytest.raises(UserError, match=r"^env\.keep_band=\[0\.9, 0\.1\] is not allowed"):
        resolve(keep_band=[0.9, 0.1])


def test_twin_knobs_are_recorded_only_when_set_and_cpu_world_sets_them():
    """warm_counts, probe_tasks and probe_attempts leave every config without them hashing as
    before (the pinned hashes above); cpu-world records its warm counts and probe size."""
    for preset in ("tiny", "cpu-small", "gpu-small"):
        env = resolve_env({"kind": "real", "preset": preset})
        assert not {"warm_counts", "probe_tasks", "probe_attempts"} & set(env)
    env = resolve_env({"kind": "real", "preset": "cpu-world"})
    assert env["warm_counts"] == "900,700,500,350,250,150" and env["probe_tasks"] == 0 and "probe_attempts" not in env
    assert env["group_size"] == 4 and env["threads"] == 1 and env["device"] == "cpu"
    assert resolve(warm_counts=" 3, 0,2,2,2,1").warm_counts == "3,0,2,2,2,1"
    assert resolve(warm_counts=[1, 2, 3, 4, 5, 6]).warm_counts == "1,2,3,4,5,6"
    for bad in ("1,2", "1,2,3,4,5,x", "1,2,3,4,5,-1", 7):
        with pytest.raises(UserError, match=r"env\.warm_counts=.* is not allowed: expected .* per training harness"):
            resolve(warm_counts=bad)


def test_a_presets_run_keys_are_what_hb_real_and_the_bench_run_with():
    from real_runs.native.presets import preset_run_keys
    assert preset_run_keys("smollm2-135m") == {"batch_groups": 6} and preset_run_keys("tiny") == {"batch_groups": 2}
    with pytest.raises(UserError, match="preset='huge' is not allowed"):
        preset_run_keys("huge")


@pytest.mark.slow
def test_the_cpu_bench_steps_at_the_presets_batch_size():
    """`python -m real_runs.native.bench cpu-steps` ran hbsim's default batch (8 groups), not the
    preset's: its per-step figures then meant a bigger step than `hb real` takes."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    small = ["--set", "warm_steps=2", "--set", "n_train_tasks=30", "--set", "n_heldout_tasks=5", "--set",
             "eval_tasks=1", "--set", "eval_attempts=1", "--set", "max_new_tokens=8"]
    env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"}
    for extra, want in (([], 2), (["--set", "batch_groups=3"], 3)):
        done = subprocess.run([sys.executable, "-m", "real_runs.native.bench", "cpu-steps", "--preset", "tiny",
                               "--steps", "2", "--policy", "uniform", *small, *extra], env=env, capture_output=True,
                              text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        got = json.loads(done.stdout)
        assert got["batch_groups"] == want and got["groups_allocated_per_step"] == want
        assert got["groups_optimized_per_step"] <= want
        assert "batch_groups" not in got["knobs"] and got["knobs"]["warm_steps"] == 2


def test_both_cpu_benches_read_a_train_table_the_same_way():
    """`phase_figures` (real_runs.native.bench, also the TRL bench's): phase means under their
    printed names, the step mean, the scheduler's share and the tokens, on a hand-made table."""
    import pandas as pd

    from real_runs.native.bench import phase_figures
    train = pd.DataFrame({"seconds_rollout": [1.0, 3.0], "seconds_tools": [0.5, 0.5], "seconds_scheduler": [0.1, 0.3],
                          "seconds_custom": [2.0, 2.0], "seconds_step": [4.0, 6.0], "tokens": [10, 20]})
    assert phase_figures(train) == {
        "cpu_seconds_per_step_by_phase": {"generation": 2.0, "scoring": 0.5, "scheduler": 0.2, "custom": 2.0},
        "cpu_seconds_per_step": 5.0, "scheduler_share": 0.04, "tokens_per_step": 15.0}
