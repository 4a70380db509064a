"""The trackers' project and run name (`--log-project`, `--log-name`, else the tracker's own
variables), the command printed after a run that shows it, and every tracker file inside
`--out` (W&B's cache, config and data folders included: nothing in the user's home)."""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from policies.errors import UserError
from real_runs.command import check_log
from real_runs.tracking import DEFAULT_PROJECT, hint, log_names, tracker_env

REPO = Path(__file__).resolve().parents[2]     # the checkout (tests/real_runs/ is two below it)


def test_names_come_from_the_options_then_the_trackers_variables_then_the_defaults(monkeypatch):
    monkeypatch.delenv("WANDB_PROJECT", raising=False)
    monkeypatch.delenv("WANDB_NAME", raising=False)
    assert log_names("wandb", None, None, "real0") == (DEFAULT_PROJECT, "real0") == ("harnessbandit", "real0")
    monkeypatch.setenv("WANDB_PROJECT", "team")
    monkeypatch.setenv("WANDB_NAME", "try3")
    assert log_names("wandb", None, None, "real0") == ("team", "try3")
    assert log_names("wandb", "mine", "run-a", "real0") == ("mine", "run-a")
    assert log_names("trackio", None, None, "real0") == ("harnessbandit", "real0")     # trackio has no variables
    with pytest.raises(UserError, match=r"^--log-project='a/b' is not allowed: expected a non-empty name"):
        log_names("trackio", "a/b", None, "real0")


def test_the_name_options_need_log_and_are_resolved_before_any_work(monkeypatch):
    monkeypatch.delenv("WANDB_NAME", raising=False)
    args = argparse.Namespace(log=None, log_project="p", log_name=None, out="runs/x")
    with pytest.raises(UserError, match=r"^--log-project: only allowed with --log tensorboard\|wandb\|trackio$"):
        check_log(args)
    args = argparse.Namespace(log="tensorboard", log_project=None, log_name=None, out="runs/x")
    check_log(args)
    assert (args.log_project, args.log_name) == ("harnessbandit", "x")


def test_every_wandb_folder_is_inside_the_run_folder_and_the_hints_are_commands(tmp_path, monkeypatch):
    env = tracker_env("wandb", tmp_path / "run")
    assert env["WANDB_MODE"] == "offline" and set(env) == {"WANDB_MODE", "WANDB_DIR", "WANDB_CACHE_DIR",
                                                           "WANDB_CONFIG_DIR", "WANDB_DATA_DIR"}
    assert all(Path(v).is_relative_to(tmp_path / "run") for k, v in env.items() if k != "WANDB_MODE")
    monkeypatch.delenv("TRACKIO_DIR", raising=False)
    monkeypatch.delitem(sys.modules, "trackio.utils", raising=False)
    assert hint("trackio", Path("runs/my run"), "p") == "TRACKIO_DIR='runs/my run/trackio' trackio show --project p"
    assert hint("tensorboard", Path("runs/r0"), "p") == "tensorboard --logdir runs/r0/tensorboard"
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_DIR", raising=False)
    assert hint("wandb", Path("runs/r0"), "p") == "wandb sync runs/r0/wandb/offline-run-*"


SINK = """
import sys
from real_runs.tracking import Sink
sink = Sink(sys.argv[1], "out", ["json", "xml"], name="r1", project="proj", config={"seed": 0})
sink.log({"reward": 0.5, "p_json": 0.25, "p_xml": 0.75}, 1)
sink.close()
print(sink.hint)
"""


def _sink_in_a_fresh_home(tmp_path: Path, kind: str) -> subprocess.CompletedProcess:
    (tmp_path / "home").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "TRACKIO_", "XDG_"))}
    env.update(HOME=str(tmp_path / "home"), PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-c", SINK, kind], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.mark.slow       # wandb starts its service process
def test_log_wandb_writes_nothing_in_the_users_home(tmp_path):
    pytest.importorskip("wandb")
    done = _sink_in_a_fresh_home(tmp_path, "wandb")
    assert sorted(p.name for p in (tmp_path / "home").rglob("*")) == []        # no ~/.cache/wandb, ~/.config/wandb
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home", "out"]
    runs = list((tmp_path / "out" / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and list(runs[0].glob("*.wandb"))
    assert any((tmp_path / "out" / "wandb" / "cache").rglob("*.log"))          # its debug logs: inside --out
    assert done.stdout.strip() == f"wandb sync {tmp_path / 'out'}/wandb/offline-run-*"


@pytest.mark.slow
def test_log_trackio_hint_points_at_the_store_that_holds_the_run(tmp_path):
    pytest.importorskip("trackio")
    done = _sink_in_a_fresh_home(tmp_path, "trackio")
    store = tmp_path / "out" / "trackio"
    lines = done.stdout.strip().splitlines()
    assert lines[-1] == f"TRACKIO_DIR={store} trackio show --project proj"    # the last line: trackio's exit
    assert not any("Uploading logs" in line for line in lines)                  # hook finishes nothing again
    assert not any(line.startswith("* View dashboard") or 'trackio show --project "' in line for line in lines)
    assert (store / "proj.db").is_file() and sorted(p.name for p in (tmp_path / "home").rglob("*")) == []
    read = subprocess.run([sys.executable, "-c", "from trackio.sqlite_storage import SQLiteStorage as S; "
                           "print([r['hb/reward'] for r in S.get_logs('proj', 'r1')])"],
                          env={**os.environ, "TRACKIO_DIR": str(store)}, capture_output=True, text=True, timeout=300)
    assert read.stdout.strip() == "[0.5]", read.stderr[-2000:]


@pytest.mark.torch
def test_hb_real_prints_the_command_that_shows_its_run(tmp_path, monkeypatch, capsys):
    pytest.importorskip("tensorboard")
    from hbsim.cli import main
    monkeypatch.setenv("HB_CACHE_DIR", str(tmp_path / "warm"))
    small = ["--set", "warm_steps=2", "--set", "n_train_tasks=30", "--set", "n_heldout_tasks=5", "--set", "eval_tasks=1",
             "--set", "eval_attempts=1", "--set", "max_new_tokens=8"]
    out = tmp_path / "run"
    assert main(["real", "--preset", "tiny", "--policy", "uniform", "--seed", "0", "--device", "cpu", "--steps", "1",
                 "--out", str(out), *small, "--log", "tensorboard", "--log-name", "try1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert f"  tensorboard: tensorboard --logdir {out / 'tensorboard'}" in lines
    assert list((out / "tensorboard").glob("events.out.tfevents.*"))
    assert main(["real", "--preset", "tiny", "--steps", "1", "--out", str(tmp_path / "x"), "--log-name", "a"]) == 2
    assert capsys.readouterr().err.strip() == "error: --log-name: only allowed with --log tensorboard|wandb|trackio"


def test_trl_report_to_trackio_replaces_trackios_own_start_hint(tmp_path, monkeypatch, capsys):
    """TRL starts trackio itself (report_to): the command trackio prints at start is hint's,
    TRACKIO_DIR included, not `trackio show --project "p"` (another store)."""
    trackio_utils = pytest.importorskip("trackio.utils")
    from real_runs.integrations import trl_run
    monkeypatch.setattr(trackio_utils, "print_dashboard_instructions", trackio_utils.print_dashboard_instructions)
    monkeypatch.setattr(trackio_utils, "TRACKIO_DIR", tmp_path / "run" / "trackio")   # the store trackio writes to
    monkeypatch.setenv("TRACKIO_DIR", "unset")
    monkeypatch.delenv("TRACKIO_DIR")                                       # report_to sets it: restored after
    assert trl_run.report_to("trackio", tmp_path / "run", "p", "n") == {"report_to": ["trackio"], "run_name": "n",
                                                                       "project": "p"}
    trackio_utils.print_dashboard_instructions("p")
    assert capsys.readouterr().out.splitlines() == ["* View dashboard by running in your terminal:",
                                                    f"TRACKIO_DIR={tmp_path / 'run' / 'trackio'} trackio show --project p"]
