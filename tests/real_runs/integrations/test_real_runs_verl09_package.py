"""The scheduler driven by the REAL verl 0.9.1 through verl's own drivers: the legacy trainer
(`trainer.use_v1=false`: HarnessRayPPOTrainer builds the sampler and hands it to verl as
`train_sampler`) and the v1 trainer (HarnessPPOTrainer registered as `trainer.v1.trainer_mode=
harnessbandit`: its `_init_dataloader` draws through the sampler, its `_compute_advantage`
reads uid, rewards and harness of each trajectory from a real TransferQueue), each through
verl's own `fit` whole, SIGKILLed mid-step and resumed from verl's checkpoint (the same train
rows, policy state and logged `hb/` metrics as the uninterrupted run); the v1 refusals and the
version gate of the entry point `verl_main`. real_runs_verl09_driver.py says what is stubbed
(the rollout and the actor workers: GPU-only).

verl 0.9.1 lives in its own environment, `.venv-verl09` (`make venv-verl09`; `make test` and
`make test-verl` build it first)."""
from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from real_runs_package_venv import ROOT, driver_result, run_driver, venv_python

DRIVER = Path(__file__).with_name("real_runs_verl09_driver.py")
HARNESSES = ["json", "xml", "kv"]
STEPS, SAVE_FREQ, KILL_AT = 5, 2, 4

pytestmark = [pytest.mark.slow, pytest.mark.roundtrip]


def _python() -> str:
    return venv_python("HB_VERL09_VENV", ".venv-verl09", "venv-verl09", "verl 0.9.1, its own pins, the CPU torch")


def _same(a, b) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and math.isclose(a, b, rel_tol=1e-12))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    python = _python()
    base = tmp_path_factory.mktemp("verl09")

    def chain(mode):
        whole = driver_result(base / f"{mode}-whole", run_driver(python, DRIVER, base / f"{mode}-whole", mode, STEPS,
                                                                 SAVE_FREQ, 0))
        killed = run_driver(python, DRIVER, base / f"{mode}-killed", mode, STEPS, SAVE_FREQ, KILL_AT)
        resumed = driver_result(base / f"{mode}-killed", run_driver(python, DRIVER, base / f"{mode}-killed", mode,
                                                                    STEPS, SAVE_FREQ, 0))
        return whole, killed, resumed

    with ThreadPoolExecutor(2) as pool:             # the two chains of processes side by side
        jobs = {mode: pool.submit(chain, mode) for mode in ("legacy", "v1")}
        return {mode: job.result() for mode, job in jobs.items()}


def _check_whole(r, expect_sampler):
    assert r["verl"] == "0.9.1" and r["sampler"] == expect_sampler
    assert r["len_dataloader"] == STEPS and r["total_training_steps"] == STEPS and r["actor_trained"] == STEPS
    assert [row["step"] for row in r["rows"]] == list(range(1, STEPS + 1))
    for row in r["rows"]:
        assert sum(row[f"alloc_{h}"] for h in HARNESSES) == 2 and row["groups_optimized"] == 2
        assert row["tokens"] == 2 * 4 * 3                  # groups x n x response length
    # the engine workers' stand-in sketch reached the step: T from the second step on
    assert r["rows"][0]["transfer"] is None and all(row["transfer"] is not None for row in r["rows"][1:])
    assert [m["step"] for m in r["logged"]] == list(range(1, STEPS + 1))
    for row, m in zip(r["rows"], r["logged"]):
        assert _same(m.get("hb/L"), row["learnability"]) and _same(m.get("hb/T"), row["transfer"])
        assert m["hb/arm"] == row["arm"]
        for h in HARNESSES:
            assert m[f"hb/alloc/{h}"] == row[f"alloc_{h}"] and _same(m[f"hb/p/{h}"], row[f"p_{h}"])


def _check_resume(whole, killed, resumed):
    assert killed.returncode == -9
    # SIGKILL in step 4, verl saved step 2 (save_freq 2): the resumed process runs steps 3-5
    assert [m["step"] for m in resumed["logged"]] == list(range(KILL_AT - 1, STEPS + 1))
    drop = {"run_id"}
    assert [{k: v for k, v in row.items() if k not in drop} for row in resumed["rows"]] == \
        [{k: v for k, v in row.items() if k not in drop} for row in whole["rows"]]
    assert resumed["probabilities"] == whole["probabilities"]


def test_legacy_trainer_builds_the_sampler_and_verl_drives_it(runs):
    whole, _, _ = runs["legacy"]
    _check_whole(whole, "HarnessCurriculumCore")
    # the legacy path keeps extra_info (and the dataset's own harness column is not needed)
    assert len(whole["update_keys"]) == STEPS
    for keys in whole["update_keys"]:
        assert {"extra_info", "data_source", "uid"} <= set(keys)
    # +data.harnessbandit.sketch=true: verl's actor worker in the role mapping became the sketching one
    assert whole["actor_sketch_plan"] == {"block_path": "model.layers", "last_blocks": None, "dim": 65536, "seed": 3}


def test_legacy_trainer_killed_run_resumes_at_verls_step(runs):
    _check_resume(*runs["legacy"])


def test_v1_trainer_draws_through_the_sampler_and_reads_transferqueue(runs):
    whole, _, _ = runs["v1"]
    _check_whole(whole, "HarnessCurriculumCore")
    assert whole["trainer_mode"] == "sync"            # registered as harnessbandit, runs verl's sync paths


def test_v1_trainer_killed_run_resumes_at_verls_step(runs):
    _check_resume(*runs["v1"])


def test_v1_refusals_and_the_gate_before_ray(tmp_path):
    import subprocess
    python = _python()
    env = {"PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
    for override, start in (("trainer.v1.trainer_mode=colocate_async", "trainer.v1.trainer_mode='colocate_async'"),
                            ("algorithm.filter_groups.enable=true", "algorithm.filter_groups.enable=true"),
                            ("trainer.v1.sampler.sync_refill_failed_groups=true",
                             "trainer.v1.sampler.sync_refill_failed_groups=true")):
        proc = subprocess.run([python, "-m", "real_runs.integrations.verl_main", "trainer.use_v1=true", override,
                               f"hydra.run.dir={tmp_path}"], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert proc.stderr.strip().splitlines()[-1].startswith(f"error: {start} is not allowed with the harness scheduler")
        assert "Traceback" not in proc.stderr and "ray init kwargs" not in proc.stdout     # before run_ppo starts Ray


def test_v1_trainer_swaps_in_the_sketching_actor_worker(tmp_path):
    """verl_engine_worker on verl 0.9.1's own classes: the trainer's seam, the worker class,
    the wrap at reset and the sketch of an update through verl's collect to the driver."""
    import numpy as np
    r = driver_result(tmp_path, run_driver(_python(), DRIVER, tmp_path, "worker", STEPS, SAVE_FREQ, 0, timeout=300))
    # +data.harnessbandit.sketch=true: the actor role's worker is verl's, with the sketching TrainingWorker inside
    assert r["roles"] == ["ActorRollout"]
    assert r["swapped_is_verls"] and r["inner_is_verls"] and r["ref_worker"] and r["registered"]
    assert r["plan"] == {"block_path": "model.layers", "last_blocks": 1, "dim": 12, "seed": 3}
    assert r["refused"] == ["data.harnessbandit.sketch=true needs verl's actor worker, but this trainer maps no "
                            "actor role (roles: ['critic'])"]
    assert r["split_roles"] == ["Actor"] and r["split_ref_kept"]         # a separate ref worker stays verl's
    assert r["inits"] == 2                                                # two resets, verl's initialize each time
    pre = np.asarray(r["pre"])                                            # the sketch before each optimizer step
    assert pre.shape == (3, 12) and not np.allclose(pre[0], pre[1])
    np.testing.assert_allclose(r["taken"], pre[0] + pre[1], rtol=1e-6)   # an update of two steps: their sum
    np.testing.assert_allclose(r["second"], pre[2], rtol=1e-6)           # the next update starts from zero
    assert r["metrics_left"] == ["pg_loss"]                               # popped before verl averages the metrics
