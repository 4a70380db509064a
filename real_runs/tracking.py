"""Live diagnostics: each train row's scheduler signals as `hb/` scalars, for the trackers
users watch (TensorBoard, Weights & Biases, trackio). The one home of that mapping, for
every backend:

* native `hb real --log tensorboard|wandb|trackio`: a `Sink` streams each row as the step
  ends (`open_sink`);
* TRL: `HarnessGRPOTrainer.log` merges `row_metrics` into the dict TRL logs, so whatever
  `report_to` names (wandb, tensorboard, trackio, ...) receives them;
* verl: `HarnessRayPPOTrainer` merges them into the step's `metrics`, which verl's own
  `Tracking` (`trainer.logger`) writes.

`row_metrics(row, harnesses)` (pure): per harness `hb/p/H` (probability), `hb/Q/H`,
`hb/visits/H`, `hb/memory_age/H`, `hb/memory_norm/H`, `hb/alloc/H` (groups given this step:
the chosen harness); per step `hb/L`, `hb/T`, `hb/l_norm`, `hb/t_norm`, `hb/score`,
`hb/reward`, `hb/entropy`, `hb/arm` (the chosen harness's index, -1 for a mixed step), `hb/cost`
(groups generated per group optimized), `hb/tokens`, `hb/seconds_scheduler`, `hb/overhead_frac`.
Non-finite values are left out (a tracker shows a gap). No tracker is a dependency: each is
an extra (`harnessbandit[tensorboard]`, `[wandb]`, `[trackio]`), imported only when asked for;
a missing one is one `UserError` line naming the extra. W&B runs offline unless the user
set `WANDB_MODE` (no network needed; `wandb sync DIR/wandb/offline-run-*` uploads later).
"""
from __future__ import annotations

import math
import os
from pathlib import Path

from policies.errors import UserError

PREFIX = "hb/"
#: the --log choices and the extra each one needs
TRACKERS = {"tensorboard": "tensorboard", "wandb": "wandb", "trackio": "trackio"}
#: (train-row column prefix, tracker name) of the per-harness columns
_PER_ARM = (("p", "p"), ("q", "Q"), ("n", "visits"), ("mem_age", "memory_age"), ("mem_norm", "memory_norm"),
            ("alloc", "alloc"))
#: (train-row column, tracker name) of the per-step scalars
_SCALARS = (("learnability", "L"), ("transfer", "T"), ("l_norm", "l_norm"), ("t_norm", "t_norm"),
            ("score", "score"), ("reward", "reward"), ("entropy", "entropy"), ("arm", "arm"),
            ("tokens", "tokens"), ("seconds_scheduler", "seconds_scheduler"), ("overhead_frac", "overhead_frac"))


def _finite(value) -> float | None:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def row_metrics(row: dict, harnesses) -> dict[str, float]:
    """The `hb/` scalars of one train row (hbsim.loop.StepRecorder's; columns absent or
    non-finite are left out)."""
    out: dict[str, float] = {}
    for column, name in _SCALARS:
        value = _finite(row.get(column))
        if value is not None:
            out[f"{PREFIX}{name}"] = value
    generated, optimized = _finite(row.get("groups_generated")), _finite(row.get("groups_optimized"))
    if generated is not None and optimized:
        out[f"{PREFIX}cost"] = generated / optimized
    for h in harnesses:
        for prefix, name in _PER_ARM:
            value = _finite(row.get(f"{prefix}_{h}"))
            if value is not None:
                out[f"{PREFIX}{name}/{h}"] = value
    return out


def check_tracker(kind: str | None) -> None:
    """Before any work: `kind` is a tracker and its package is installed (UserError otherwise)."""
    if kind is None:
        return
    if kind not in TRACKERS:
        raise UserError(f"--log {kind!r} is not allowed: expected one of {', '.join(TRACKERS)}")
    import importlib.util
    if importlib.util.find_spec(TRACKERS[kind]) is None:
        raise UserError(f"--log {kind} needs the optional extra: pip install 'harnessbandit[{kind}]'")


class Sink:
    """One tracker's run: `log(row, step)` writes the row's `row_metrics`; `close()` ends it."""

    def __init__(self, kind: str, folder, harnesses, *, name: str, config: dict | None = None):
        check_tracker(kind)
        self.kind, self.harnesses = kind, list(harnesses)
        folder = Path(folder)
        if kind == "tensorboard":
            from torch.utils.tensorboard import SummaryWriter
            self._run = SummaryWriter(log_dir=str(folder / "tensorboard"))
        elif kind == "wandb":
            import wandb
            self._run = wandb.init(project="harnessbandit", name=name, dir=str(folder), config=config or {},
                                   mode=os.environ.get("WANDB_MODE", "offline"), reinit="create_new")
        else:
            os.environ.setdefault("TRACKIO_DIR", str(folder / "trackio"))   # read when trackio is imported
            import trackio
            self._run = trackio.init(project="harnessbandit", name=name, config=config or {}, embed=False)

    def log(self, row: dict, step: int) -> dict[str, float]:
        metrics = row_metrics(row, self.harnesses)
        if self.kind == "tensorboard":
            for key, value in metrics.items():
                self._run.add_scalar(key, value, global_step=step)
            self._run.flush()
        else:
            self._run.log(metrics, step=step)
        return metrics

    def close(self) -> None:
        if self.kind == "tensorboard":
            self._run.close()
        else:
            self._run.finish()


def open_sink(kind: str | None, folder, harnesses, *, name: str, config: dict | None = None) -> Sink | None:
    """The sink of `--log kind` writing under `folder` (None without a tracker)."""
    return None if kind is None else Sink(kind, folder, harnesses, name=name, config=config)
