"""`hb real` through a subprocess: a tiny run, resume to a larger --steps, bad input; `hb real
--backend trl` and the TRL example script (their processes import TRL, this file does not)."""
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from hbsim.cli import main

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["--set", "warm_steps=2", "--set", "n_train_tasks=30", "--set", "n_heldout_tasks=5",
         "--set", "eval_tasks=1", "--set", "eval_attempts=1", "--set", "max_new_tokens=8"]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    return {**os.environ, "PYTHONPATH": str(ROOT), "HB_CACHE_DIR": str(tmp_path_factory.mktemp("warm")),
            "OMP_NUM_THREADS": "1"}


def hb(env, *args):
    return subprocess.run([sys.executable, "-m", "hbsim.cli", "real", *args], env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.slow
def test_tiny_run_resume_and_straight_agree(tmp_path, env, capsys):
    base = ["--preset", "tiny", "--policy", "uniform", "--seed", "1", "--device", "cpu", *SMALL]
    straight = hb(env, *base, "--steps", "2", "--out", str(tmp_path / "a"))
    assert straight.returncode == 0, straight.stderr[-2000:]
    assert "scheduler overhead" in straight.stdout and "heldout_harness" in straight.stdout
    assert "step 2/2" in straight.stderr
    first = hb(env, *base, "--steps", "1", "--out", str(tmp_path / "b"))
    assert first.returncode == 0, first.stderr[-2000:]
    assert main(["real", *base, "--steps", "1", "--out", str(tmp_path / "b")]) == 2
    assert "already holds a run" in capsys.readouterr().err
    assert main(["real", *base, "--steps", "2", "--out", str(tmp_path / "b"), "--resume", "--set", "lr=0.5"]) == 2
    err = capsys.readouterr().err
    assert "(env.lr differ); only --steps may change" in err and len(err.strip().splitlines()) == 1
    resumed = hb(env, *base, "--steps", "2", "--out", str(tmp_path / "b"), "--resume")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resumed" in resumed.stderr and "step 2/2" in resumed.stderr
    a, b = tmp_path / "a", tmp_path / "b"
    assert sorted(p.name for p in a.iterdir()) == [".hb-kind.json", "checkpoints", "eval.parquet", "groups.parquet", "run.json",
                                                  "train.parquet"]
    ta, tb = pd.read_parquet(a / "train.parquet"), pd.read_parquet(b / "train.parquet")
    timing = [c for c in ta.columns if c.startswith("seconds_") or c == "overhead_frac"]
    assert len(ta) == 2 and ta["overhead_frac"].between(0, 1).all()
    pd.testing.assert_frame_equal(ta.drop(columns=timing), tb.drop(columns=timing))
    ea, eb = pd.read_parquet(a / "eval.parquet"), pd.read_parquet(b / "eval.parquet")
    assert sorted(eb.step.unique()) == [1, 2]     # the 1-step run's final evaluation is kept
    pd.testing.assert_frame_equal(ea, eb[eb.step == 2].reset_index(drop=True))
    assert set(ea.suite) == {"heldout_tasks", "heldout_harness"} and (ea.step == 2).all()
    meta = json.loads((a / "run.json").read_text())
    assert meta["config"]["env"]["kind"] == "real" and meta["config"]["steps"] == 2
    assert meta["config"]["env"]["d_model"] == 64 and meta["run_id"] == meta["config_hash"]
    assert meta["versions"].get("torch")


@pytest.mark.parametrize("args, needle", [
    (["--preset", "huge"], "--preset"),
    (["--set", "lr"], "KEY=VALUE"),
    (["--set", "lrr=1"], "no knob 'lrr'"),
    (["--set", "policy.tauu=1"], "tauu"),
    (["--policy", "nope"], "policy name='nope'"),
    (["--counterfactual", "0"], "--counterfactual"),
    (["--backend", "trl", "--counterfactual", "2"], "--counterfactual 2 is not allowed with --backend trl"),
    (["--set", "warm_counts=1,2"], "warm_counts='1,2' is not allowed"),
    (["--set", "probe_tasks=-1"], "probe_tasks"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, args, needle):
    assert main(["real", "--steps", "1", "--out", str(tmp_path / "x"), "--device", "cpu", *args]) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x").exists()


def _nones(value, where=""):
    if isinstance(value, dict):
        return [n for k, v in value.items() for n in _nones(v, f"{where}.{k}")]
    return [where] if value is None else []


def test_grid_cell_and_hb_real_resolve_the_same_config(tmp_path):
    import argparse

    import hbsim
    from ablations.spec import load_spec
    from real_runs import cli as real_cli
    from ablations_testkit import write_grid

    grid = write_grid(tmp_path / "real.toml", steps=3, seeds=1, env={"kind": "real", "preset": "tiny", "lr": 0.003},
                      policies=[{"name": "uniform"}], top_extra={"batch_groups": 2})
    cell = load_spec(grid).cells()[0]
    assert _nones(cell.config["env"]) == [] and cell.config["env"]["d_model"] == 64
    parser = argparse.ArgumentParser()
    real_cli.add_arguments(parser)
    args = parser.parse_args(["--policy", "uniform", "--seed", "0", "--steps", "3", "--out", str(tmp_path / "r"),
                              "--set", "lr=0.003"])
    config = real_cli.build_config(args)
    assert config == cell.config and hbsim.config_hash(config) == cell.id


def test_resume_without_a_checkpoint_is_one_line_exit_2(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    for out, needle in ((tmp_path / "missing", "does not exist"), (tmp_path / "empty", "is empty")):
        assert main(["real", "--steps", "1", "--out", str(out), "--device", "cpu", "--resume", *SMALL]) == 2
        err = capsys.readouterr().err
        assert needle in err and "--resume" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "missing").exists() and list((tmp_path / "empty").iterdir()) == []


@pytest.mark.slow
def test_sigterm_checkpoints_after_the_step_and_resume_finishes(tmp_path, env):
    import signal
    import time

    import torch

    out = tmp_path / "run"
    base = ["--preset", "tiny", "--policy", "uniform", "--seed", "0", "--device", "cpu", *SMALL]
    proc = subprocess.Popen([sys.executable, "-m", "hbsim.cli", "real", *base, "--steps", "500", "--out", str(out),
                             "--checkpoint-every", "1000"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    for line in proc.stderr:                     # warm start, "model ready", then one line per step
        lines.append(line)
        if line.startswith("step 2/500"):        # printed after step 1's hook saved its checkpoint
            break
    first = torch.load(out / "checkpoints" / "last.pt", weights_only=False)
    assert first["loop"]["t"] == 1               # the first checkpoint is written after step 1 (then only at 1000)
    assert any(line.startswith("warm start: step 0/2") for line in lines)
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    rest = proc.stderr.read()
    assert proc.wait(timeout=120) == 128 + signal.SIGTERM, rest[-2000:]
    saved = torch.load(out / "checkpoints" / "last.pt", weights_only=False)
    at = saved["loop"]["t"]
    assert f"stopped by SIGTERM after step {at}/500" in rest and not (out / "run.json").exists()
    done = hb(env, *base, "--steps", str(at + 1), "--out", str(out), "--resume")
    assert done.returncode == 0, done.stderr[-2000:]
    train = pd.read_parquet(out / "train.parquet")
    assert train.step.tolist() == list(range(1, at + 2))


def test_resolve_env_bad_kind_or_harness_count_is_a_user_error():
    from policies.errors import UserError
    from real_runs.native.presets import resolve_env

    with pytest.raises(UserError, match=r"env kind='bernoulli' is not allowed here: expected 'real'"):
        resolve_env({"kind": "bernoulli"})
    with pytest.raises(UserError, match=r"env n_harnesses=3 is not allowed for kind 'real'"):
        resolve_env({"kind": "real", "n_harnesses": 3})


# -- hb real --backend trl (moved from integrations/test_real_runs_trl.py: a subprocess, no torch here)
NEEDS_TRL = pytest.mark.skipif(importlib.util.find_spec("trl") is None, reason="trl (extra 'trl') not installed")


def _run(*argv, cwd=None):
    """python ARGV offline (HF_HUB_OFFLINE), as the TRL backend runs in CI."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OPENBLAS_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, *argv], env=env, capture_output=True, text=True, timeout=300, cwd=cwd)


@NEEDS_TRL
@pytest.mark.slow
def test_hb_real_backend_trl_writes_a_run_that_hb_report_reads(tmp_path):
    from hbsim.contract import atomic
    base = ["-m", "hbsim.cli", "real", "--backend", "trl", "--steps", "2",     # no --device: the default works
            "--set", 'harnesses=["json","xml","kv"]', "--set", "n_train_tasks=12", "--set", "max_completion_length=8"]
    for policy in ("harnessbandit", "mixed"):
        proc = _run(*base, "--policy", policy, "--out", str(tmp_path / "grid" / policy))
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert "scheduler overhead" in proc.stdout
    train = pd.read_parquet(tmp_path / "grid" / "harnessbandit" / "train.parquet")
    assert list(train["arm"]) == [0, 1] and {"p_json", "alloc_kv", "overhead_frac"} <= set(train.columns)
    ckpt = tmp_path / "grid" / "harnessbandit" / "trl" / "checkpoint-2"
    mode = 0o666 & ~atomic.current_umask()       # TRL's files follow the umask (safetensors writes 0600)
    assert {p.name: p.stat().st_mode & 0o777 for p in ckpt.iterdir()} == {p.name: mode for p in ckpt.iterdir()}
    again = _run(*base, "--policy", "harnessbandit", "--out", str(tmp_path / "grid" / "harnessbandit"))
    assert again.returncode == 2 and "already holds a run; use --resume" in again.stderr
    proc = _run(*base[:6], "3", *base[7:], "--policy", "harnessbandit", "--resume",
                "--out", str(tmp_path / "grid" / "harnessbandit"))      # through hb: from trl/checkpoint-2
    assert proc.returncode == 0, proc.stderr[-2000:]
    resumed = pd.read_parquet(tmp_path / "grid" / "harnessbandit" / "train.parquet")
    other = _run(*base[:6], "4", *base[7:], "--set", "lr=0.5", "--policy", "harnessbandit", "--resume",
                 "--out", str(tmp_path / "grid" / "harnessbandit"))     # the checkpoint's saved config differs
    assert other.returncode == 2 and "(env.lr differ); only --steps may change" in other.stderr
    assert "Traceback" not in other.stderr
    assert_frame_equal = pd.testing.assert_frame_equal
    assert_frame_equal(pd.read_parquet(tmp_path / "grid" / "harnessbandit" / "train.parquet"), resumed)
    assert list(resumed["step"]) == [1, 2, 3] and list(resumed["arm"])[:2] == [0, 1]
    pd.testing.assert_frame_equal(resumed.iloc[:2].drop(columns="run_id"), train.drop(columns="run_id"))
    meta = json.loads((tmp_path / "grid" / "mixed" / "run.json").read_text())
    assert meta["config"]["env"]["kind"] == "trl" and meta["versions"]["trl"]
    proc = _run("-m", "hbsim.cli", "report", str(tmp_path / "grid"), "--baseline", "mixed", "--k", "1",
                "--resamples", "50", "--out", str(tmp_path / "report"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "report" / "report.md").exists()
    bad = _run(*base, "--policy", "mixed", "--set", "nope=1", "--out", str(tmp_path / "bad"))
    assert bad.returncode == 2 and "nope" in bad.stderr and "Traceback" not in bad.stderr


@NEEDS_TRL
@pytest.mark.slow
def test_example_script_runs(tmp_path):
    proc = _run(str(ROOT / "examples" / "trl_harnessbandit.py"), "--steps", "2", "--out",
                str(tmp_path / "ex"), cwd=str(ROOT))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "ex" / "run.json").exists() and "scheduler overhead" in proc.stdout


def test_counterfactual_flag_is_the_run_knob_a_grid_cell_carries(tmp_path):
    import argparse

    from ablations.spec import load_spec
    from ablations_testkit import write_grid
    from real_runs import cli as real_cli

    grid = write_grid(tmp_path / "real.toml", steps=3, seeds=1, env={"kind": "real", "preset": "cpu-world"},
                      policies=[{"name": "uniform"}], top_extra={"counterfactual": 2, "batch_groups": 4})
    cell = load_spec(grid).cells()[0]
    parser = argparse.ArgumentParser()
    real_cli.add_arguments(parser)
    args = parser.parse_args(["--preset", "cpu-world", "--policy", "uniform", "--seed", "0", "--steps", "3",
                              "--out", str(tmp_path / "r"), "--counterfactual", "2"])
    config = real_cli.build_config(args)
    assert config["counterfactual"] == 2 and config == cell.config
    assert "counterfactual" not in real_cli.build_config(parser.parse_args(["--steps", "3", "--out", "x"]))


def test_a_backend_without_its_extra_is_one_line_exit_2_before_any_work(tmp_path, monkeypatch, capsys):
    """A base install (no torch, no TRL): `hb real` names the extra to install, not a traceback."""
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in ("torch", "trl") else real_find_spec(name, *a))
    for backend, line in (("native", "hb real needs the optional extra: pip install 'harnessbandit[torch]'"),
                          ("trl", "--backend trl needs the optional extra (Python >= 3.11): "
                                  "pip install 'harnessbandit[trl]'")):
        out = tmp_path / backend
        assert main(["real", "--preset", "tiny", "--steps", "1", "--out", str(out), "--backend", backend]) == 2
        assert capsys.readouterr().err.strip() == f"error: {line}"
        assert not out.exists()
