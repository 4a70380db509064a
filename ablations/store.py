"""The grid directory on disk (its layout: `hbsim.contract`), with atomic cells.

A cell is written into a temporary directory and renamed into place only when
complete, so `cells/<id>/` either holds a complete result or does not exist, whatever
moment the runner or a worker is killed at. Reading the cells back is
`hbsim.records.load_cells`.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from hbsim import folders
from hbsim.contract import CELLS, FAILED, GRID_JSON, LOG
from hbsim.records import done_ids
from policies.errors import UserError


def cells_dir(root: str | os.PathLike) -> Path:
    return Path(root) / CELLS


def failed_ids(root: str | os.PathLike) -> set[str]:
    """Ids with a failure log and no complete result."""
    d = Path(root) / FAILED
    if not d.is_dir():
        return set()
    return {p.name for p in d.iterdir() if not p.name.startswith(".") and p.is_dir()} - done_ids(root)


def failure_log(root: str | os.PathLike, cell_id: str) -> Path:
    return Path(root) / FAILED / cell_id / LOG


def failure_reason(root: str | os.PathLike, cell_id: str) -> str:
    """The last non-empty line of a failure's log (the exception line of a traceback)."""
    try:
        lines = [ln for ln in failure_log(root, cell_id).read_text().splitlines() if ln.strip()]
    except OSError:
        return "(no log)"
    return lines[-1].strip() if lines else "(empty log)"


def check_writable(root: str | os.PathLike) -> None:
    """Raise UserError unless `root` is (or can be created as) a writable folder whose
    path is not too long (hbsim.folders; nothing is written)."""
    folders.check_path_length(root)
    folders.check_writable(root)


def read_grid_json(root: str | os.PathLike) -> dict | None:
    path = Path(root) / GRID_JSON
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise UserError(f"{path}: unreadable grid record ({exc})") from None


def open_grid(root: str | os.PathLike, name: str, spec: dict, *, force_mixed: bool = False) -> None:
    """Create DIR (if needed) and record the grid; refuse a different grid's DIR, a folder
    of another kind and a non-empty folder hb did not create (`hbsim.folders`), unless
    `force_mixed` (`--force`).

    Call only after every input has been validated: this is the first write to DIR.
    """
    root = Path(root)
    folders.check_output_dir(root, "grid", force=force_mixed)
    record = read_grid_json(root)
    if record is not None:
        names = record.get("names", [record.get("name")])
        if name not in names and not force_mixed:
            raise UserError(f"--out {root}: holds cells of grid {record.get('name')!r}, not {name!r}; "
                             "use another --out or pass --force")
    elif root.exists() and any(p for p in (root / CELLS).glob("[!.]*")):
        if not force_mixed:
            raise UserError(f"--out {root}: holds cells but no {GRID_JSON}; pass --force to add to it")
    root.mkdir(parents=True, exist_ok=True)
    folders.claim_output_dir(root, "grid", tool="hb grid run")
    (root / CELLS).mkdir(exist_ok=True)
    names = list(record.get("names", [record.get("name")])) if record else []
    if name not in names:
        names.append(name)
    new = {"name": names[0], "names": names, "spec": spec}
    if new != record:
        folders.write_json_atomic(root / GRID_JSON, new)


def clean_tmp(root: str | os.PathLike) -> int:
    """Remove temporary cell directories left by killed runs; returns how many."""
    d = cells_dir(root)
    if not d.is_dir():
        return 0
    stale = [p for p in d.iterdir() if p.name.startswith(".")]  # hidden = temporary (ours or write_run's)
    for p in stale:
        shutil.rmtree(p, ignore_errors=True)
    return len(stale)


def write_cell(root: str | os.PathLike, cell_id: str, write_into, log: str | None = None) -> bool:
    """Write a cell atomically: `write_into(tmp_dir)` fills a new empty temporary directory
    (`hbsim.folders.make_temp_dir`), which is then renamed to `cells/<cell_id>`. Returns
    False if the cell already existed (another worker finished it first); the temporary
    directory is removed either way.
    """
    final = cells_dir(root) / cell_id
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = folders.make_temp_dir(final)
    try:
        write_into(tmp)
        if log is not None:
            (tmp / LOG).write_text(log)
        try:
            os.rename(tmp, final)
        except OSError:
            if final.is_dir():
                return False
            raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    clear_failure(root, cell_id)
    return True


def write_failure(root: str | os.PathLike, cell_id: str, text: str) -> Path:
    """Record a failed cell's log (atomic replace); returns the log path."""
    path = failure_log(root, cell_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    return folders.atomic_write(path, text)


def clear_failure(root: str | os.PathLike, cell_id: str) -> None:
    shutil.rmtree(Path(root) / FAILED / cell_id, ignore_errors=True)
