"""Live diagnostics (real_runs/tracking.py): a train row's hb/ scalars, hand-computed; each
tracker's offline output read back (TensorBoard event files through tensorboard's reader, the
W&B offline run file, trackio's local SQLite store); `hb real --log` (native) and TRL's
`report_to` through HarnessGRPOTrainer.log. The trackers are the extra harnessbandit[trackers]
(the Makefile's set-up installs it, so CI runs these)."""
from __future__ import annotations

import json
import math
import struct
import sys

import numpy as np
import pandas as pd
import pytest

from policies.errors import UserError
from real_runs import tracking
from real_runs.tracking import Sink, check_tracker, row_metrics

H = ["json", "kv"]
ROW = {"step": 3, "arm": -1, "learnability": 0.5, "transfer": float("nan"), "l_norm": 1.0, "t_norm": 0.25,
       "score": 0.75, "reward": 0.375, "entropy": 0.8, "tokens": 24, "seconds_scheduler": 0.002,
       "groups_generated": 3, "groups_optimized": 2, "p_json": 0.25, "p_kv": 0.75, "q_json": 0.1,
       "q_kv": float("nan"), "n_json": 2, "n_kv": 1, "mem_age_json": 0, "mem_age_kv": 2, "mem_norm_json": 1.5,
       "alloc_json": 1, "alloc_kv": 1, "policy": "hb", "run_id": "abc"}


def test_row_metrics_hand_computed():
    m = row_metrics(ROW, H)
    assert m == {"hb/L": 0.5, "hb/l_norm": 1.0, "hb/t_norm": 0.25, "hb/score": 0.75, "hb/reward": 0.375,
                 "hb/entropy": 0.8, "hb/arm": -1.0, "hb/tokens": 24.0, "hb/seconds_scheduler": 0.002,
                 "hb/cost": 1.5,                           # 3 groups generated per 2 optimized
                 "hb/p/json": 0.25, "hb/Q/json": 0.1, "hb/visits/json": 2.0, "hb/memory_age/json": 0.0,
                 "hb/memory_norm/json": 1.5, "hb/alloc/json": 1.0,
                 "hb/p/kv": 0.75, "hb/visits/kv": 1.0, "hb/memory_age/kv": 2.0, "hb/alloc/kv": 1.0}
    # T and Q of kv are nan, mem_norm_kv absent: left out (a gap in the tracker), never logged as 0
    assert "hb/T" not in m and "hb/Q/kv" not in m and "hb/memory_norm/kv" not in m
    assert row_metrics({"groups_generated": 1, "groups_optimized": 0}, H) == {}


def test_step_and_eval_metrics_hand_computed():
    row = {**ROW, "loss": -0.125, "grad_norm": 2.5, "kl": float("nan"), "clip_frac": 0.0}
    # 3 groups of G = 4 (json, kv, json) and one of G = 2 (kv); one kv group's reward is NaN (left out)
    groups = {"arm": np.array([0, 1, 0, 1]), "size": np.array([4, 4, 4, 2]),
              "reward_mean": np.array([0.5, 0.25, 1.0, np.nan]), "success": np.array([0.25, 0.0, 1.0, 0.5])}
    m = tracking.step_metrics(row, H, groups)
    assert {k: v for k, v in m.items() if k.startswith("hb/")} == row_metrics(row, H)
    assert {k: v for k, v in m.items() if not k.startswith("hb/")} == pytest.approx({
        "train/loss": -0.125, "train/grad_norm": 2.5, "train/clip_frac": 0.0,    # kl NaN: left out
        "groups/reward_mean": (2 + 1 + 4) / 12, "groups/reward_mean/json": 0.75, "groups/reward_mean/kv": 0.25,
        "groups/success": (1 + 0 + 4 + 1) / 14, "groups/success/json": 0.625, "groups/success/kv": 1 / 6})
    assert tracking.step_metrics(row, H, None) == tracking.step_metrics(row, H, {"arm": np.array([], int)})
    frame = pd.DataFrame({"step": 4, "suite": ["heldout_tasks"] * 3 + ["heldout_harness"],
                          "harness": ["json", "json", "kv", "hash"], "reward": [1.0, 0.5, 0.0, 0.25],
                          "success": [1.0, 0.0, 0.0, 0.0]})
    assert tracking.eval_metrics(frame) == pytest.approx({
        "eval/heldout_tasks/success": 1 / 3, "eval/heldout_tasks/success/json": 0.5,
        "eval/heldout_tasks/success/kv": 0.0, "eval/heldout_tasks/reward": 0.5,
        "eval/heldout_tasks/reward/json": 0.75, "eval/heldout_tasks/reward/kv": 0.0,
        "eval/heldout_harness/success": 0.0, "eval/heldout_harness/success/hash": 0.0,
        "eval/heldout_harness/reward": 0.25, "eval/heldout_harness/reward/hash": 0.25})


def test_sink_logs_each_evaluation_once_at_its_step_after_a_resume_point(tmp_path):
    pytest.importorskip("tensorboard")
    ev = {s: pd.DataFrame({"step": s, "suite": ["heldout_tasks"], "harness": ["json"], "reward": [s / 4],
                           "success": [float(s > 1)]}) for s in (0, 1, 2, 3)}
    sink = Sink("tensorboard", tmp_path, H, name="r")
    sink.logged_through = 1                      # resumed at step 1: evaluations 0 and 1 were logged before
    first = sink.log_step(ROW, 2, evals=[ev[0], ev[1], ev[2]])
    second = sink.log_step(ROW, 3, evals=[ev[0], ev[1], ev[2], ev[3], ev[3].assign(success=0.0)])
    sink.close()
    assert list(first) == [2] and list(second) == [3]
    scalars = _tensorboard_scalars(tmp_path / "tensorboard")
    assert scalars["eval/heldout_tasks/reward/json"] == [(2, 0.5), (3, 0.75)]
    assert scalars["eval/heldout_tasks/success"] == [(2, 1.0), (3, 1.0)]   # the budget copy of step 3 not again
    assert [s for s, _ in scalars["hb/L"]] == [2, 3]


def test_unknown_or_missing_tracker_is_one_line(monkeypatch):
    with pytest.raises(UserError, match=r"^--log 'mlflow' is not allowed: expected one of tensorboard, wandb, "
                                        r"trackio$"):
        check_tracker("mlflow")
    import importlib.util
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    for kind in tracking.TRACKERS:
        with pytest.raises(UserError) as info:
            check_tracker(kind)
        assert str(info.value) == f"--log {kind} needs the optional extra: pip install 'harnessbandit[{kind}]'"
    check_tracker(None)


@pytest.mark.cli
def test_hb_real_log_without_its_extra_is_one_line_exit_2_before_any_work(tmp_path, monkeypatch, capsys):
    import importlib.util

    from hbsim.cli import main
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real_find_spec(name, *a))
    for backend in ("native", "trl"):
        out = tmp_path / backend
        assert main(["real", "--steps", "1", "--out", str(out), "--device", "cpu", "--backend", backend,
                     "--log", "wandb"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.endswith("--log wandb needs the optional extra: pip install 'harnessbandit[wandb]'")
        assert len(err.splitlines()) == 1 and not out.exists()


def _wandb_history(folder) -> list[dict]:
    """The history records of a W&B offline run file (`run-*.wandb`: LevelDB-log framing,
    32 KiB blocks of records with a 7-byte header, each a wandb_internal_pb2.Record)."""
    from wandb.proto import wandb_internal_pb2 as pb
    (path,) = folder.glob("wandb/offline-run-*/run-*.wandb")
    raw, pos, part, out, block = path.read_bytes(), 7, b"", [], 32768
    assert raw[:4] == b":W&B"
    while pos + 7 <= len(raw):
        if block - pos % block < 7:
            pos += block - pos % block
            continue
        _, n, kind = struct.unpack("<IHB", raw[pos:pos + 7])
        pos += 7
        part += raw[pos:pos + n]
        pos += n
        if kind in (1, 4):               # FULL or LAST
            rec = pb.Record()
            rec.ParseFromString(part)
            part = b""
            if rec.WhichOneof("record_type") == "history":
                out.append({(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in rec.history.item})
    return out


@pytest.mark.slow     # wandb starts its wandb-core service process
def test_wandb_sink_writes_an_offline_run_read_back(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.delenv("WANDB_MODE", raising=False)       # offline by default: no network, no account
    sink = Sink("wandb", tmp_path, H, name="r", config={"seed": 0})
    sink.log(ROW, 3)
    sink.log({**ROW, "learnability": 0.25, "arm": 1}, 4)
    sink.close()
    import wandb
    # W&B's service process writes the offline run file after finish() returns (here, about 1
    # read in 3 found only its 7-byte header); a process's exit tears the service down, which
    # waits for the file (what `hb real` does when it ends): do the same before reading it back.
    wandb.teardown()
    hist = _wandb_history(tmp_path)
    assert [h["_step"] for h in hist] == [3, 4]
    for h, want in zip(hist, (row_metrics(ROW, H), row_metrics({**ROW, "learnability": 0.25, "arm": 1}, H))):
        assert {k: v for k, v in h.items() if k.startswith("hb/")} == pytest.approx(want)


def test_trackio_sink_writes_its_local_store_read_back(tmp_path, monkeypatch):
    pytest.importorskip("trackio")
    import trackio  # noqa: F401  (its store folder is bound at import: point every binding here)
    for name, module in list(sys.modules.items()):
        if name.startswith("trackio") and hasattr(module, "TRACKIO_DIR"):
            monkeypatch.setattr(module, "TRACKIO_DIR", tmp_path / "store")
    sink = Sink("trackio", tmp_path, H, name="r1")
    sink.log(ROW, 3)
    sink.log({**ROW, "p_json": 0.5, "p_kv": 0.5}, 4)
    sink.close()
    from trackio.sqlite_storage import SQLiteStorage
    logs = SQLiteStorage.get_logs("harnessbandit", "r1")
    assert [r["step"] for r in logs] == [3, 4]
    assert {k: v for k, v in logs[0].items() if k.startswith("hb/")} == pytest.approx(row_metrics(ROW, H))
    assert logs[1]["hb/p/json"] == 0.5 and logs[1]["hb/cost"] == 1.5


def _tensorboard_scalars(folder) -> dict:
    """{tag: [(step, value), ...]} of every event file under `folder` (tensorboard's reader)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    out: dict = {}
    for run in sorted({p.parent for p in folder.rglob("events.out.tfevents.*")}):
        acc = EventAccumulator(str(run))
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            out.setdefault(tag, []).extend((e.step, e.value) for e in acc.Scalars(tag))
    return out


SMALL = ["--set", "warm_steps=2", "--set", "n_train_tasks=30", "--set", "n_heldout_tasks=5",
         "--set", "eval_tasks=1", "--set", "eval_attempts=1", "--set", "max_new_tokens=8"]


@pytest.mark.torch
def test_hb_real_log_tensorboard_streams_each_train_row(tmp_path, monkeypatch):
    pytest.importorskip("tensorboard")
    from hbsim.cli import main
    from real_runs.world.episode import Episode
    monkeypatch.setenv("HB_CACHE_DIR", str(tmp_path / "warm"))
    # a stand-in checker with reward variance inside groups, so every step optimizes (a finite loss)
    monkeypatch.setattr(Episode, "reward", lambda self: (sum(map(ord, self.context())) % 3) / 2.0)
    out = tmp_path / "run"
    assert main(["real", "--preset", "tiny", "--policy", "uniform", "--seed", "0", "--device", "cpu", "--steps", "2",
                 "--out", str(out), *SMALL, "--eval-every", "1", "--log", "tensorboard"]) == 0
    train = pd.read_parquet(out / "train.parquet")
    groups, ev = pd.read_parquet(out / "groups.parquet"), pd.read_parquet(out / "eval.parquet")
    scalars = _tensorboard_scalars(out / "tensorboard")
    harnesses = [c[2:] for c in train.columns if c.startswith("p_")]
    assert [s for s, _ in scalars["hb/arm"]] == [1, 2]

    def close(a, b, tag):
        assert math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-7), (tag, a, b)   # TensorBoard stores float32

    for _, row in train.iterrows():
        want = row_metrics(row.to_dict(), harnesses)
        got = {tag: v for tag, vals in scalars.items() for s, v in vals if s == row["step"]}
        assert {t for t in got if t.startswith("hb/")} == set(want) and "hb/p/" + harnesses[0] in got
        for tag, value in want.items():
            if tag not in ("hb/seconds_scheduler", "hb/overhead_frac"):      # timings: the row's own float32
                close(got[tag], value, tag)
        # the parquet files' values under their names: train.parquet's loss and gradient norm, the
        # step's generated groups (groups.parquet; G is fixed, so the rollout mean is the group mean)
        assert row["groups_optimized"] > 0 and np.isfinite(row[["loss", "grad_norm"]].astype(float)).all()
        for column in ("loss", "grad_norm", "kl", "clip_frac", "update_norm"):
            close(got[f"train/{column}"], row[column], column)
        mine = groups[groups["step"] == row["step"]]
        want = {"groups/reward_mean": mine["reward_mean"].mean(), "groups/success": mine["success"].mean()}
        for h, part in mine.groupby("harness"):
            want.update({f"groups/reward_mean/{h}": part["reward_mean"].mean(),
                         f"groups/success/{h}": part["success"].mean()})
        assert {t for t in got if t.startswith("groups/")} == set(want) and len(mine) > 0
        for tag, value in want.items():
            close(got[tag], value, tag)
    # every evaluation (steps 0, 1, 2), per suite and per (suite, harness), at its own step
    assert sorted(ev["step"].unique()) == [0, 1, 2] and set(ev["suite"]) == {"heldout_tasks", "heldout_harness"}
    for step, e in ev.groupby("step"):
        got = {tag: v for tag, vals in scalars.items() for s, v in vals if s == step and tag.startswith("eval/")}
        want = {}
        for suite, part in e.groupby("suite"):
            for column in ("success", "reward"):
                want[f"eval/{suite}/{column}"] = part[column].mean()
                want.update({f"eval/{suite}/{column}/{h}": v for h, v in part.groupby("harness")[column].mean().items()})
        assert set(got) == set(want)
        for tag, value in want.items():
            close(got[tag], value, tag)
    assert all(len({s for s, _ in v}) == len(v) for v in scalars.values())      # nothing logged twice


@pytest.mark.torch
def test_trl_report_to_carries_the_hb_rows(tmp_path, monkeypatch):
    pytest.importorskip("trl")
    pytest.importorskip("tensorboard")
    import torch

    from hbsim.experiment import resolve_policy
    from real_runs.integrations import trl_run
    torch.set_num_threads(1)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", "unset")     # restored to the user's value after the test
    monkeypatch.delenv("TENSORBOARD_LOGGING_DIR")              # (report_to sets it: DIR/tensorboard)
    harnesses = ["json", "xml", "kv"]
    cfg = trl_run.TRL_KNOBS.settings(dict(harnesses=harnesses, n_train_tasks=12, n_heldout_tasks=2, eval_tasks=1,
                                          max_completion_length=8, batch_groups=2, group_size=4, lr=1e-3,
                                          sketch_dim=256))
    pc = resolve_policy({"name": "harnessbandit", "label": "hb"}, len(harnesses))
    out = tmp_path / "trl"
    extra = trl_run.report_to("tensorboard", out)
    assert extra == {"report_to": ["tensorboard"]}
    trainer, sched, _ = trl_run.build(cfg, policy_cfg=pc, seed=0, steps=2, out=str(out), checkpoint_every=100,
                                      extra_args=extra)
    trainer.train()
    # transformers' callbacks prefix a training log's keys with "train/" (TensorBoard and W&B alike)
    scalars = {tag[len("train/"):]: v for tag, v in _tensorboard_scalars(out / "tensorboard").items()
               if tag.startswith("train/hb/")}
    rows = sched.recorder.rows
    assert len(rows) == 2 and [s for s, _ in scalars["hb/arm"]] == [1, 2]     # TRL logs at its global step
    for row in rows:
        got = {tag: v for tag, vals in scalars.items() for s, v in vals if s == row["step"]}
        want = row_metrics(row, harnesses)
        assert set(got) == set(want)
        for tag in ("hb/L", "hb/arm", "hb/cost", "hb/p/json", "hb/alloc/kv"):
            if tag in want:
                assert math.isclose(got[tag], want[tag], rel_tol=1e-6), tag
