"""The sampler driven by the REAL verl package (0.7.1) through verl's own code path: verl's
Hydra config with the user's `+data.harnessbandit.*` overrides, `RayPPOTrainer.__init__` ->
`create_rl_sampler`, `fit` on real `DataProto`s (collate, uid, `_get_gen_batch`, repeat, the
agent loop's `_postprocess`, reward extraction, GRPO advantages, verl's checkpoint and
`_load_checkpoint`), with a SIGKILL mid-run and a resume (real_runs_verl_driver.py says
what is stubbed: the rollout and actor workers); and verl's `DataParallelPPOActor` subclass
taking the sketch before verl's own clipping, on an FSDP2 module.

verl needs numpy < 2, so it lives in a separate environment, `.venv-verl`, built by
`make venv-verl` (`make test` and `make test-verl` build it first); the driver runs there as
a subprocess (real_runs_package_venv.py: on CI a missing environment fails the test; elsewhere
it skips, saying how to build it).
"""
from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from real_runs_package_venv import driver_result, run_driver, venv_python

DRIVER = Path(__file__).with_name("real_runs_verl_driver.py")
HARNESSES = ["json", "xml", "kv"]
STEPS, SAVE_FREQ, KILL_AT = 6, 2, 5

pytestmark = [pytest.mark.slow, pytest.mark.roundtrip]


def _python() -> str:
    return venv_python("HB_VERL_VENV", ".venv-verl", "venv-verl", "verl 0.7.1, numpy<2, the CPU torch")


def _run(out: Path, *args):
    return run_driver(_python(), DRIVER, out, *args)


_result = driver_result


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    _python()
    base = tmp_path_factory.mktemp("verl")

    def whole():
        return _result(base / "whole", _run(base / "whole", "harness", STEPS, SAVE_FREQ, 0))

    def killed_then_resumed():
        killed = _run(base / "killed", "harness", STEPS, SAVE_FREQ, KILL_AT)
        latest = (base / "killed" / "ckpt" / "latest_checkpointed_iteration.txt").read_text()
        return killed, latest, _result(base / "killed", _run(base / "killed", "harness", STEPS, SAVE_FREQ, 0))

    def stock():
        first = _run(base / "stock", "stock", 4, SAVE_FREQ, 3)
        return first, _run(base / "stock", "stock", 4, SAVE_FREQ, 0)

    def actor():
        return _result(base / "actor", _run(base / "actor", "actor"))

    with ThreadPoolExecutor(3) as pool:            # the chains of processes, three side by side
        jobs = [pool.submit(f) for f in (whole, killed_then_resumed, stock, actor)]
        return [j.result() for j in jobs]


def _same(a: float | None, b: float | None) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and math.isclose(a, b, rel_tol=1e-12))


def test_verl_builds_the_sampler_and_drives_it_through_its_own_fit(runs):
    r = runs[0]
    assert r["verl"] == "0.7.1" and r["sampler"] == "HarnessCurriculumSampler"
    assert r["len_dataloader"] == STEPS and r["total_training_steps"] == STEPS and r["actor_trained"] == STEPS
    assert [row["step"] for row in r["rows"]] == list(range(1, STEPS + 1))
    # what survives _get_gen_batch: the dataset's own `harness` column does not reach update
    assert len(r["update_keys"]) == STEPS
    for keys in r["update_keys"]:
        assert "harness" not in keys and {"extra_info", "data_source", "uid", "reward_model"} <= set(keys)
    for row in r["rows"]:
        assert sum(row[f"alloc_{h}"] for h in HARNESSES) == 2 and row["groups_optimized"] == 2
        assert row["tokens"] == 2 * 4 * 3                 # groups x n x response length (verl's response_mask)
    # the sketch (legacy worker's meta_info) reached update: T from the second step on
    assert r["rows"][0]["transfer"] is None and all(row["transfer"] is not None for row in r["rows"][1:])
    # the hb/ row merged into verl's metrics, logged at verl's step
    assert [m["step"] for m in r["logged"]] == list(range(1, STEPS + 1))
    for row, m in zip(r["rows"], r["logged"]):
        assert _same(m.get("hb/L"), row["learnability"]) and _same(m.get("hb/T"), row["transfer"])
        assert m["hb/arm"] == row["arm"] and m["hb/cost"] == 1.0
        for h in HARNESSES:
            assert m[f"hb/alloc/{h}"] == row[f"alloc_{h}"] and _same(m[f"hb/p/{h}"], row[f"p_{h}"])
    # verl 0.7.1 defaults trainer.total_epochs to 30: the planned steps would be re-entered 29 times
    assert r["epochs_refusal"] == (f"trainer.total_training_steps={30 * STEPS} (len(train_dataloader) x "
                                   f"trainer.total_epochs unless set) differs from data.harnessbandit.steps={STEPS}: "
                                   f"set trainer.total_epochs=1 or trainer.total_training_steps={STEPS}")


def test_a_killed_run_resumes_at_verls_step_with_the_uninterrupted_schedulers_state(runs):
    whole, (killed, latest, resumed) = runs[0], runs[1]
    assert killed.returncode == -9 and latest == str(KILL_AT - 1)    # SIGKILL in step 5, verl saved step 4
    assert [m["step"] for m in resumed["logged"]] == [KILL_AT, STEPS]   # the resumed process ran steps 5, 6
    assert len(resumed["update_keys"]) == STEPS - KILL_AT + 1
    drop = {"run_id"}
    same = [{k: v for k, v in row.items() if k not in drop} for row in resumed["rows"]]
    assert same == [{k: v for k, v in row.items() if k not in drop} for row in whole["rows"]]
    assert resumed["probabilities"] == whole["probabilities"]
    assert resumed["len_dataloader"] == STEPS and resumed["total_training_steps"] == STEPS


def test_a_stock_trainer_checkpoint_is_refused_on_resume_not_replayed(runs):
    first, again = runs[2]
    assert first.returncode == -9
    assert again.returncode == 2
    assert ("error: this sampler state was saved during step 2, before its sampler.update(batch) (verl's stock "
            "RayPPOTrainer saves before it)") in again.stderr and "HarnessRayPPOTrainer" in again.stderr


def test_verls_actor_subclass_takes_the_sketch_before_verls_clipping(runs):
    r = runs[3]
    # verl's own _optimizer_step clipped (grad_clip 0.01 against a norm of about 2.5) and stepped
    assert r["grad_norm"] > 1.0 and r["moved"]
    ratio = 0.01 / r["grad_norm"]
    assert r["taken"] == r["pre_clip"] and len(r["taken"]) == 12
    assert r["post_clip"] == pytest.approx([v * ratio for v in r["pre_clip"]], rel=1e-4, abs=1e-9)
    assert r["after_take"] is None                  # taken once per step
