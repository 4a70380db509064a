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

Every tracker writes inside the run's folder DIR (`tracker_env`: W&B's run, cache, config and
data folders, trackio's store, TensorBoard's events), unless the user set the tracker's own
variable. The project and run name (`log_names`): `--log-project` / `--log-name`, else the
tracker's own variables (W&B's WANDB_PROJECT / WANDB_NAME; trackio has none), else
"harnessbandit" and the run folder's name. `hint` is the command that shows the run (trackio's
own printed hint lacks TRACKIO_DIR: the native sink hides it, `trackio_hint_at_start` replaces
it where TRL starts trackio).

Beside the `hb/` scalars, the native backend's sink logs what the run's parquet files hold,
under their names (`file stem/column[/harness]`):

* `step_metrics(row, harnesses, groups)`: the trainer's train-row columns `train/loss`,
  `train/grad_norm`, `train/kl`, `train/clip_frac`, `train/update_norm` (TRAIN_COLUMNS); and
  from the step's rows of groups.parquet (every group generated, before the filter)
  `groups/reward_mean` and `groups/success` (means over the rollouts of all of them) and
  per harness generated `groups/reward_mean/H`, `groups/success/H` (training success);
* `eval_metrics(frame)`: one evaluation (eval.parquet rows of one step), per suite
  `eval/SUITE/success`, `eval/SUITE/reward` and per harness `eval/SUITE/success/H`,
  `eval/SUITE/reward/H` (means over the suite's attempts), logged at the evaluation's step
  (`step = 0`: before training).
"""
from __future__ import annotations

import contextlib
import io
import math
import os
import shlex
import sys
from pathlib import Path

from policies.errors import UserError, require_extra
from policies.validate import check_name

PREFIX = "hb/"
#: the --log choices and the extra each one needs
TRACKERS = {"tensorboard": "tensorboard", "wandb": "wandb", "trackio": "trackio"}
#: the project of a run when neither --log-project nor the tracker's variable names one
DEFAULT_PROJECT = "harnessbandit"
#: tracker -> (its own variable of the project, of the run name); trackio and TensorBoard have none
NAME_VARS = {"wandb": ("WANDB_PROJECT", "WANDB_NAME"), "trackio": (None, None), "tensorboard": (None, None)}
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


#: the train-row columns (train.parquet, the trainer's `StepResult.extras` and update norm)
#: logged as `train/COLUMN`
TRAIN_COLUMNS = ("loss", "grad_norm", "kl", "clip_frac", "update_norm")
#: the groups.parquet and eval.parquet columns logged (means over rollouts / attempts)
GROUP_VALUES = ("reward_mean", "success")
EVAL_VALUES = ("success", "reward")


def _means(values, weights, keys) -> dict:
    """{key: weighted mean of the finite values} over the distinct keys (None = all)."""
    import numpy as np
    values, weights = np.asarray(values, dtype=np.float64), np.asarray(weights, dtype=np.float64)
    ok = np.isfinite(values)
    out = {}
    for key in (None, *dict.fromkeys(keys)):
        sel = ok if key is None else ok & (np.asarray(keys, dtype=object) == key)
        if weights[sel].sum() > 0:
            out[key] = float((values[sel] * weights[sel]).sum() / weights[sel].sum())
    return out


def step_metrics(row: dict, harnesses, groups: dict | None = None) -> dict[str, float]:
    """`row_metrics` of a train row, its TRAIN_COLUMNS as `train/COLUMN`, and, given the
    step's groups (`StepResult.groups` arrays: arm, size, reward_mean, success), the means
    over all generated rollouts `groups/VALUE` and per harness `groups/VALUE/H`
    (non-finite values left out)."""
    out = row_metrics(row, harnesses)
    for column in TRAIN_COLUMNS:
        value = _finite(row.get(column))
        if value is not None:
            out[f"train/{column}"] = value
    if groups is not None and len(groups.get("arm", ())):
        names = [list(harnesses)[int(a)] for a in groups["arm"]]
        for column in GROUP_VALUES:
            for key, value in _means(groups[column], groups["size"], names).items():
                out[f"groups/{column}" + ("" if key is None else f"/{key}")] = value
    return out


def eval_metrics(frame) -> dict[str, float]:
    """The scalars of one evaluation (eval frame rows: suite, harness, success, reward):
    per suite `eval/SUITE/VALUE` (mean over its attempts) and `eval/SUITE/VALUE/H`."""
    out: dict[str, float] = {}
    for suite, part in frame.groupby("suite", sort=True):
        for column in EVAL_VALUES:
            for key, value in _means(part[column], [1.0] * len(part), list(part["harness"])).items():
                out[f"eval/{suite}/{column}" + ("" if key is None else f"/{key}")] = value
    return out


def check_tracker(kind: str | None) -> None:
    """Before any work: `kind` is a tracker and its package is installed (UserError otherwise)."""
    if kind is None:
        return
    if kind not in TRACKERS:
        raise UserError(f"--log {kind!r} is not allowed: expected one of {', '.join(TRACKERS)}")
    require_extra(TRACKERS[kind], f"--log {kind}", kind)


def log_names(kind: str, project: str | None, name: str | None, default_name: str) -> tuple[str, str]:
    """(project, run name) of a tracker's run: the options given, else the tracker's own
    variables (`NAME_VARS`), else DEFAULT_PROJECT and ``default_name`` (the run folder's name);
    each checked as a name (`policies.validate.check_name`: trackio stores a project as a file)."""
    project_var, name_var = NAME_VARS.get(kind, (None, None))
    project = project or (os.environ.get(project_var) if project_var else None) or DEFAULT_PROJECT
    name = name or (os.environ.get(name_var) if name_var else None) or default_name
    return check_name("--log-project", project), check_name("--log-name", name)


def tracker_env(kind: str, folder) -> dict[str, str]:
    """The variables that keep a tracker's files inside ``folder`` (the run's --out): W&B's run
    (WANDB_DIR), cache and debug logs (WANDB_CACHE_DIR), settings (WANDB_CONFIG_DIR), artifact
    staging (WANDB_DATA_DIR) and its offline mode; trackio's store; TensorBoard's events (TRL's
    variable). `apply_env` sets those the user has not set."""
    folder = Path(folder).resolve()
    if kind == "wandb":
        return {"WANDB_MODE": "offline", "WANDB_DIR": str(folder), "WANDB_CACHE_DIR": str(folder / "wandb" / "cache"),
                "WANDB_CONFIG_DIR": str(folder / "wandb" / "config"), "WANDB_DATA_DIR": str(folder / "wandb" / "data")}
    if kind == "trackio":
        return {"TRACKIO_DIR": str(folder / "trackio")}
    if kind == "tensorboard":
        return {"TENSORBOARD_LOGGING_DIR": str(folder / "tensorboard")}
    return {}


def apply_env(kind: str, folder) -> list[str]:
    """`tracker_env` into this process's environment, where the user has not set a variable
    (read by the tracker when it starts, and by its service process); the variables set."""
    added = [key for key in tracker_env(kind, folder) if key not in os.environ]
    for key in added:
        os.environ[key] = tracker_env(kind, folder)[key]
    return added


def hint(kind: str, folder, project: str) -> str:
    """The command that shows a run logged under ``folder`` (the variables as this process has them)."""
    q = shlex.quote
    if kind == "tensorboard":
        return f"tensorboard --logdir {q(str(Path(folder) / 'tensorboard'))}"
    if kind == "trackio":       # the store trackio read at its import (TRACKIO_DIR then), where the run is
        utils = sys.modules.get("trackio.utils")
        store = str(utils.TRACKIO_DIR) if utils is not None else os.environ.get("TRACKIO_DIR", str(Path(folder) / "trackio"))
        return f"TRACKIO_DIR={q(store)} trackio show --project {q(project)}"
    if os.environ.get("WANDB_MODE", "offline") == "offline":
        return f"wandb sync {q(os.environ.get('WANDB_DIR', str(folder)))}/wandb/offline-run-*"
    return f"the W&B project {project} (online: wandb.ai)"


def trackio_hint_at_start(folder) -> None:
    """trackio prints `trackio show --project P` when a run starts, without the TRACKIO_DIR that
    holds the run (`tracker_env`: DIR/trackio), so that command shows another store; from now
    on in this process it prints `hint`'s command instead. For a trackio run that hb does not
    start itself (TRL's `report_to`); the native `Sink` hides trackio's start-up lines."""
    import trackio.utils
    if hasattr(trackio.utils, "print_dashboard_instructions"):
        trackio.utils.print_dashboard_instructions = lambda project: print(
            f"* View dashboard by running in your terminal:\n{hint('trackio', folder, project)}")


class Sink:
    """One tracker's run: `log(row, step)` writes the row's `row_metrics`; `log_step` a step's
    `step_metrics` and the evaluations not yet logged (`eval_metrics`); `close()` ends it.
    `logged_through`: evaluations of this step or earlier count as logged (a resumed run's
    earlier process logged them). project / name: `log_names`' (the caller resolves them:
    `hb real --log-project/--log-name`)."""

    def __init__(self, kind: str, folder, harnesses, *, name: str, config: dict | None = None,
                 project: str = DEFAULT_PROJECT):
        check_tracker(kind)
        self.kind, self.harnesses, self.project = kind, list(harnesses), project
        self.logged_through, self._eval_steps = -1, set()
        folder = Path(folder)
        self.hint = None
        self._env = apply_env(kind, folder)   # read when the tracker starts: nothing of it outside the folder
        if kind == "tensorboard":
            from torch.utils.tensorboard import SummaryWriter
            self._run = SummaryWriter(log_dir=str(folder / "tensorboard"))
        elif kind == "wandb":
            import wandb
            self._run = wandb.init(project=project, name=name, dir=os.environ["WANDB_DIR"], config=config or {},
                                   mode=os.environ["WANDB_MODE"], reinit="create_new")
        else:
            import trackio
            with contextlib.redirect_stdout(io.StringIO()):   # its hint lacks TRACKIO_DIR: `hint` replaces it
                self._run = trackio.init(project=project, name=name, config=config or {}, embed=False)
        self.hint = hint(kind, folder, project)
        if kind == "wandb" and os.environ["WANDB_MODE"] != "offline" and getattr(self._run, "url", None):
            self.hint = self._run.url                 # an online run: its page

    def log(self, row: dict, step: int) -> dict[str, float]:
        metrics = row_metrics(row, self.harnesses)
        self._write(metrics, step)
        return metrics

    def log_step(self, row: dict, step: int, *, groups: dict | None = None, evals=()) -> dict[int, dict]:
        """The step's `step_metrics` and the `eval_metrics` of every evaluation frame in
        `evals` whose step is later than `logged_through` and not yet logged, each at its
        own step, in step order; returns {step: metrics} as written."""
        out: dict[int, dict] = {}
        for frame in evals:
            at = int(frame["step"].iloc[0]) if len(frame) else None
            if at is None or at <= self.logged_through or at in self._eval_steps:
                continue
            self._eval_steps.add(at)
            out.setdefault(at, {}).update(eval_metrics(frame))
        out.setdefault(int(step), {}).update(step_metrics(row, self.harnesses, groups))
        for at in sorted(out):
            self._write(out[at], at)
        return out

    def _write(self, metrics: dict[str, float], step: int) -> None:
        if self.kind == "tensorboard":
            for key, value in metrics.items():
                self._run.add_scalar(key, value, global_step=step)
            self._run.flush()
        else:
            self._run.log(metrics, step=step)

    def close(self) -> None:
        """End the run; the variables `apply_env` set go (a later run in this process sets its own)."""
        if self.kind == "tensorboard":
            self._run.close()
        elif self.kind == "trackio":
            import trackio
            with contextlib.redirect_stdout(io.StringIO()):   # "Uploading logs to Trackio": it is local
                trackio.finish()     # the module's finish forgets the run too: else trackio's exit hook
                                     # finishes it again and prints that line after the hint
        else:
            self._run.finish()
        for key in self._env:
            os.environ.pop(key, None)
        self._env = []


def open_sink(kind: str | None, folder, harnesses, *, name: str, config: dict | None = None,
              project: str = DEFAULT_PROJECT) -> Sink | None:
    """The sink of `--log kind` writing under `folder` (None without a tracker)."""
    return None if kind is None else Sink(kind, folder, harnesses, name=name, config=config, project=project)
