"""The scheduler driven by the REAL skyrl 0.4.0 through SkyRL's own training loop
(`RayPPOTrainer.train`): HarnessSkyRLTrainer's dataloader override drawing through the
project's sampler over each prompt row's env_class (SkyRL's PromptDataset on a parquet file),
the step read back before SkyRL pops rewards and uids, HarnessCallback's on_step_end and
on_log, the scheduler's state written into SkyRL's checkpoint folders; whole, SIGKILLed
mid-step and resumed (the same train rows and policy state), SkyRL's stock checkpoint refused,
DAPO dynamic sampling refused. real_runs_skyrl_driver.py says what is stubbed (the generator
and the workers: GPU-only).

skyrl 0.4.0 lives in its own environment, `.venv-skyrl` (`make venv-skyrl`; `make test` and
`make test-verl` build it first)."""
from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from real_runs_package_venv import driver_result, run_driver, venv_python

DRIVER = Path(__file__).with_name("real_runs_skyrl_driver.py")
HARNESSES = ["gsm8k", "search", "sql"]
STEPS, CKPT, KILL_AT = 5, 2, 4

pytestmark = [pytest.mark.slow, pytest.mark.roundtrip]


def _python() -> str:
    return venv_python("HB_SKYRL_VENV", ".venv-skyrl", "venv-skyrl", "skyrl 0.4.0, its own pins, the CPU torch")


def _same(a, b) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and math.isclose(a, b, rel_tol=1e-12))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    python = _python()
    base = tmp_path_factory.mktemp("skyrl")

    def run(name, *args):
        return run_driver(python, DRIVER, base / name, *args)

    def whole():
        return driver_result(base / "whole", run("whole", "harness", STEPS, CKPT, 0))

    def killed_then_resumed():
        killed = run("killed", "harness", STEPS, CKPT, KILL_AT)
        latest = (base / "killed" / "ckpt" / "latest_ckpt_global_step.txt").read_text()
        return killed, latest, driver_result(base / "killed", run("killed", "harness", STEPS, CKPT, 0))

    def refusals():
        stock = run("stock", "stock", 3, CKPT, 0)
        again = run("stock", "harness", 3, CKPT, 0)
        dynamic = run("dynamic", "dynamic", 3, CKPT, 0)
        return stock, again, dynamic

    with ThreadPoolExecutor(2) as pool:
        jobs = [pool.submit(f) for f in (whole, killed_then_resumed, refusals)]
        return [j.result() for j in jobs]


def test_skyrl_draws_through_the_sampler_and_the_callback_records_each_step(runs):
    r = runs[0]
    assert r["len_dataloader"] == STEPS and r["total_training_steps"] == STEPS
    # the row without env_class took environment.env_class=search
    assert r["env_class"] == ["gsm8k", "search", "gsm8k", "gsm8k"] + ["search"] * 4 + ["sql"] * 4
    assert [row["step"] for row in r["rows"]] == list(range(1, STEPS + 1))
    for row in r["rows"]:
        assert sum(row[f"alloc_{h}"] for h in HARNESSES) == 2 and row["groups_optimized"] == 2
        assert row["tokens"] == 2 * 4 * 3 and row["transfer"] is None     # no sketch in SkyRL's workers: T missing
    assert [m["step"] for m in r["logged"]] == list(range(1, STEPS + 1))
    for row, m in zip(r["rows"], r["logged"]):
        assert _same(m.get("hb/L"), row["learnability"]) and m["hb/arm"] == row["arm"]
        for h in HARNESSES:
            assert m[f"hb/alloc/{h}"] == row[f"alloc_{h}"] and _same(m[f"hb/p/{h}"], row[f"p_{h}"])


def test_a_killed_skyrl_run_resumes_with_the_uninterrupted_schedulers_state(runs):
    whole, (killed, latest, resumed) = runs[0], runs[1]
    assert killed.returncode == -9 and latest == str(KILL_AT - 2)      # checkpoints every 2: step 2 saved
    assert [m["step"] for m in resumed["logged"]] == list(range(KILL_AT - 1, STEPS + 1))
    drop = {"run_id"}
    assert [{k: v for k, v in row.items() if k not in drop} for row in resumed["rows"]] == \
        [{k: v for k, v in row.items() if k not in drop} for row in whole["rows"]]
    assert resumed["probabilities"] == whole["probabilities"]


def test_a_stock_checkpoint_and_dynamic_sampling_are_refused(runs):
    stock, again, dynamic = runs[2]
    assert stock.returncode == 0, stock.stderr[-3000:]
    assert again.returncode == 2
    assert "has no harnessbandit.pt (it was not written by the harness scheduler's trainer)" in again.stderr
    assert dynamic.returncode == 2
    assert "error: trainer.algorithm.dynamic_sampling.type='filter' is not allowed with the harness scheduler" \
        in dynamic.stderr
