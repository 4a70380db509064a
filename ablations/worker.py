"""Running one cell, in whatever process a backend puts it: the same function serves the
in-process loop (--jobs 1), the local process pool and Ray tasks.

A task is a plain dict (cheap to pickle):
    {"id", "config" (resolved), "label", "seed", "sweep", "grid" (name), "out" (grid dir),
     "plugins" (module names)}
and the answer is {"id", "ok", "seconds", "reason"} — never an exception: a failing
cell writes its traceback to DIR/failed/<id>/log.txt and the grid goes on.
"""
from __future__ import annotations

import json
import os
import time
import traceback
from pathlib import Path

from ablations import store
from ablations.spec import REAL_KIND, import_plugins


def adapter_factory(config: dict):
    """None for synthetic environments (hbsim builds them); real_runs' factory for "real"."""
    if config["env"]["kind"] != REAL_KIND:
        return None
    import real_runs  # lazily: torch is only needed for real runs
    return real_runs.adapter_factory


def execute(task: dict) -> dict:
    """Run one cell and store it atomically; failures are recorded, not raised."""
    import hbsim

    started = time.perf_counter()
    cell_id, root = task["id"], task["out"]
    try:
        import_plugins(task.get("plugins", []))
        result = hbsim.run_config(task["config"], adapter_factory=adapter_factory(task["config"]))
        result.meta["grid"] = {"name": task["grid"], "cell_id": cell_id, "sweep": task["sweep"],
                               "label": task["label"], "seed": task["seed"]}

        ran = time.perf_counter() - started

        def write_into(tmp: Path) -> None:
            hbsim.write_run(result, tmp)
            (tmp / "log.txt").write_text(
                f"cell {cell_id} ({task['label']}, seed {task['seed']}) ran in {ran:.3f}s, tables written in "
                f"{time.perf_counter() - started - ran:.3f}s, in process {os.getpid()}\n")

        store.write_cell(root, cell_id, write_into)
        return {"id": cell_id, "ok": True, "seconds": time.perf_counter() - started, "reason": ""}
    except Exception as exc:  # noqa: BLE001 - a cell's failure must not stop the grid
        text = (f"cell {cell_id} ({task.get('label')}, seed {task.get('seed')}) failed\n"
                f"config: {json.dumps(task.get('config'), sort_keys=True, default=str)}\n\n"
                + traceback.format_exc())
        try:
            log = store.write_failure(root, cell_id, text)
        except OSError as write_exc:  # pragma: no cover - the grid dir vanished
            log = f"(failure log not written: {write_exc})"
        reason = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
        return {"id": cell_id, "ok": False, "seconds": time.perf_counter() - started,
                "reason": reason, "log": str(log)}
