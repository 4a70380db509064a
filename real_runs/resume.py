"""`--resume` continues the same run: the one comparison of a checkpoint's saved run config
with the config of the command that resumes it (`same_run`), and the one check that the
checkpoint does not lie beyond --steps (`within_steps`), shared by both `hb real` backends
(`real_runs.cli` native, `real_runs.integrations.trl_run`), which import it from here
(neither backend imports the other for it); and a grid cell's own checkpoints
(`cell_checkpoints`: `hb grid run` of a real grid continues a killed cell from its last one).
"""
from __future__ import annotations

import time
from pathlib import Path

from hbsim.contract import CELL_PROGRESS
from hbsim.contract.atomic import write_json_atomic
from policies.errors import UserError


def within_steps(at: int, steps: int) -> None:
    """UserError when the checkpoint (at step `at`) lies beyond --steps."""
    if at > steps:
        raise UserError(f"--steps={steps} is not allowed: the checkpoint is already at step {at}")


def same_run(saved: dict, config: dict) -> None:
    """UserError unless run config `config` equals the checkpoint's `saved` but for
    `steps` (both backends' --resume); the message names what differs."""
    a = {k: v for k, v in saved.items() if k != "steps"}
    b = {k: v for k, v in config.items() if k != "steps"}
    if a != b:
        env_a, env_b = a.get("env") or {}, b.get("env") or {}
        diff = [f"env.{k}" for k in sorted(set(env_a) | set(env_b)) if env_a.get(k) != env_b.get(k)]
        diff += sorted(k for k in set(a) | set(b) if k != "env" and a.get(k) != b.get(k))
        raise UserError(f"--resume config does not match the checkpoint's ({', '.join(diff)} differ); "
                         "only --steps may change")


def cell_checkpoints(run_dir, config: dict, every: int):
    """A real grid cell's checkpoints in `run_dir` (the grid's DIR/running/<id>/): returns
    (the loop state of its checkpoint, or None to start; the step hook for `run_config` that
    saves one after step 1, every `every` steps and never at the last step, when the cell
    itself is written). The checkpoint holds what `hb real`'s does (`native.checkpoint`).
    After every step the hook also writes `run_dir/progress.json` (`CELL_PROGRESS_RECORD`:
    the step, the planned steps, the step's seconds and the time), which `hb grid status`
    shows for the cells still running."""
    from real_runs.native import checkpoint

    saved = checkpoint.load(run_dir)
    state = None
    if saved is not None:
        same_run(saved["config"], config)
        within_steps(int(saved["loop"]["t"]), int(config["steps"]))
        state = saved["loop"]

    def hook(loop) -> bool:
        if loop.t < int(config["steps"]) and (loop.t == 1 or loop.t % every == 0):
            checkpoint.save(run_dir, config, loop.state_dict())
        last = loop.rows[-1] if loop.rows else {}
        write_json_atomic(Path(run_dir) / CELL_PROGRESS,
                          {"step": int(loop.t), "steps": int(config["steps"]),
                           "seconds_step": float(last.get("seconds_step", float("nan"))),
                           "time": time.strftime("%Y-%m-%d %H:%M:%S")})
        return False

    return state, hook
