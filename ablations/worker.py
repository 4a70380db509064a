"""Running one task of `ablations.runner` (the task dict is described there) in whatever
process a backend puts it: in this process (--jobs 1), a pool worker or a Ray task.

The answer is {"id", "ok", "seconds", "cpu_seconds", "reason"} (cpu: this process's CPU time)
(+ "result", the RunResult, for a task without a run directory; + "rows",
`reports.readings.summary.summary_rows`, for a task with "summary"), never an exception: a failed run answers with "traceback" and
"log" (FAILURES/failed/<id>/log.txt for a task with "failures"; + "errno" when an OSError
failed it) and the batch goes on, unless the storage refused the write (`run_many`).
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
import traceback
from pathlib import Path

import ablations.store as store
from ablations.plan import REAL_KIND
from hbsim.contract import LOG, threads
from hbsim.experiment import run_config
from hbsim.contract.atomic import write_dir_atomic
from hbsim.contract.records import fill_run_dir, is_complete
from reports.readings.summary import summary_rows
from policies.errors import UserError
from policies.registry import load_plugins


def adapter_factory(config: dict):
    """None for synthetic environments (hbsim builds them); real_runs' factory for "real", in a
    process whose malloc then keeps freed memory, as `hb real`'s does (`threads.keep_freed_memory`)."""
    if config["env"]["kind"] != REAL_KIND:
        return None
    import real_runs  # lazily: torch is only needed for real runs
    threads.keep_freed_memory()
    return real_runs.adapter_factory


def execute(task: dict) -> dict:
    """Run one task; its run directory is written atomically (`hbsim.contract.atomic.write_dir_atomic`)."""
    started, cpu = time.perf_counter(), time.process_time()
    try:
        load_plugins(task.get("plugins", []))
        state, hook = None, None
        if task.get("resume_dir"):            # a real cell: its own checkpoints (real_runs.resume.cell_checkpoints)
            from real_runs.resume import cell_checkpoints
            state, hook = cell_checkpoints(task["resume_dir"], task["config"], task["checkpoint_every"])
        result = run_config(task["config"], adapter_factory=adapter_factory(task["config"]), state=state,
                            checkpoint=hook)
        result.meta.update(task.get("meta") or {})
        if task.get("dir"):
            ran = time.perf_counter() - started

            def write_into(tmp: Path) -> None:
                fill_run_dir(result, tmp)
                if task.get("log"):
                    resumed = f", resumed at step {state['t']}" if state is not None else ""
                    (tmp / LOG).write_text(
                        f"run {task['id']} ({result.meta['label']}, seed {result.meta['seed']}) ran in {ran:.3f}s"
                        f"{resumed}, tables written in {time.perf_counter() - started - ran:.3f}s, in process "
                        f"{os.getpid()}\n")

            write_dir_atomic(task["dir"], write_into, keep=(lambda d: False) if task.get("replace") else is_complete)
            if task.get("resume_dir"):         # the cell is written: its checkpoint goes, and DIR/running/ once empty
                shutil.rmtree(task["resume_dir"], ignore_errors=True)
                with contextlib.suppress(OSError):
                    Path(task["resume_dir"]).parent.rmdir()
            if task.get("failures"):
                store.clear_failure(task["failures"], task["id"])
        answer = {"id": task["id"], "ok": True, "seconds": time.perf_counter() - started,
                  "cpu_seconds": time.process_time() - cpu, "reason": ""}
        if task.get("summary"):
            answer["rows"] = summary_rows(result.train, result.eval)
        return answer if task.get("dir") else {**answer, "result": result}
    except Exception as exc:  # noqa: BLE001 - a run's failure must not stop the batch
        text = (f"run {task.get('id')} failed\n"
                f"config: {json.dumps(task.get('config'), sort_keys=True, default=str)}\n\n"
                + traceback.format_exc())
        reason = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
        answer = failure(task, reason, text, time.perf_counter() - started)
        if isinstance(exc, OSError) and exc.errno is not None:
            answer["errno"] = exc.errno      # run_many stops the batch on a full or read-only disk
        if isinstance(exc, UserError):       # a user's bug (a plugin policy's probabilities): one line, not a traceback
            answer["user_error"] = str(exc).strip().splitlines()[0] if str(exc).strip() else reason
        return answer


def failure(task: dict, reason: str, text: str, seconds: float = 0.0) -> dict:
    """The answer of a failed task; its log is written where the task keeps failures."""
    log = ""
    if task.get("failures"):
        try:
            log = str(store.write_failure(task["failures"], task["id"], text))
        except OSError as write_exc:  # pragma: no cover - the output folder vanished
            log = f"(failure log not written: {write_exc})"
    return {"id": task["id"], "ok": False, "seconds": seconds, "reason": reason, "log": log, "traceback": text}
