"""The grid directory on disk, with atomic cells.

    DIR/.hb-kind.json             the folder's kind marker ("grid"; policies.validate)
    DIR/grid.json                 name of the grid (+ every name admitted by --force) and its spec
    DIR/cells/<id>/               a complete run directory: train.parquet, eval.parquet, run.json, log.txt
    DIR/cells/.tmp-<id>-<pid>/    a cell being written (never read; removed by the next run)
    DIR/failed/<id>/log.txt       the traceback of a failed cell
    DIR/train.parquet, DIR/eval.parquet   after `hb grid collect`

A cell is written into its temporary directory and renamed into place only when
complete, so `cells/<id>/` either holds a complete result or does not exist, whatever
moment the runner or a worker is killed at.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from policies import validate
from policies.errors import UserError

GRID_JSON = "grid.json"
CELLS = "cells"
FAILED = "failed"
TMP_PREFIX = ".tmp-"


def cells_dir(root: str | os.PathLike) -> Path:
    return Path(root) / CELLS


def done_ids(root: str | os.PathLike) -> set[str]:
    """Ids of the complete cells (hidden temporary directories excluded)."""
    d = cells_dir(root)
    if not d.is_dir():
        return set()
    return {p.name for p in d.iterdir() if not p.name.startswith(".") and p.is_dir()}


def failed_ids(root: str | os.PathLike) -> set[str]:
    """Ids with a failure log and no complete result."""
    d = Path(root) / FAILED
    if not d.is_dir():
        return set()
    return {p.name for p in d.iterdir() if not p.name.startswith(".") and p.is_dir()} - done_ids(root)


def failure_log(root: str | os.PathLike, cell_id: str) -> Path:
    return Path(root) / FAILED / cell_id / "log.txt"


def failure_reason(root: str | os.PathLike, cell_id: str) -> str:
    """The last non-empty line of a failure's log (the exception line of a traceback)."""
    try:
        lines = [ln for ln in failure_log(root, cell_id).read_text().splitlines() if ln.strip()]
    except OSError:
        return "(no log)"
    return lines[-1].strip() if lines else "(empty log)"


def check_writable(root: str | os.PathLike) -> None:
    """Raise UserError unless `root` is (or can be created as) a writable folder whose
    path is not too long (policies.validate; nothing is written)."""
    validate.check_path_length(root)
    validate.check_writable(root)


def read_grid_json(root: str | os.PathLike) -> dict | None:
    path = Path(root) / GRID_JSON
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise UserError(f"{path}: unreadable grid record ({exc})") from None


def write_json_atomic(path: Path, obj: dict) -> None:
    tmp = path.with_name(f"{TMP_PREFIX}{path.name}-{os.getpid()}")
    tmp.write_text(json.dumps(obj, indent=1, sort_keys=True, default=str) + "\n")
    os.replace(tmp, path)


def open_grid(root: str | os.PathLike, name: str, spec: dict, *, force_mixed: bool = False) -> None:
    """Create DIR (if needed) and record the grid; refuse a different grid's DIR, a folder
    of another kind and a non-empty folder hb did not create (`policies.validate`), unless
    `force_mixed` (`--force`).

    Call only after every input has been validated: this is the first write to DIR.
    """
    root = Path(root)
    validate.check_output_dir(root, "grid", force=force_mixed)
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
    validate.claim_output_dir(root, "grid", tool="hb grid run")
    (root / CELLS).mkdir(exist_ok=True)
    names = list(record.get("names", [record.get("name")])) if record else []
    if name not in names:
        names.append(name)
    new = {"name": names[0], "names": names, "spec": spec}
    if new != record:
        write_json_atomic(root / GRID_JSON, new)


def clean_tmp(folder: str | os.PathLike) -> int:
    """Remove the temporary directories killed writers left in `folder` (a grid's cells/, an
    `hb sim` label folder): hidden names holding ".tmp-" (ours or write_run's); returns how many."""
    d = Path(folder)
    if not d.is_dir():
        return 0
    stale = [p for p in d.iterdir() if p.name.startswith(".") and TMP_PREFIX in p.name]
    for p in stale:
        shutil.rmtree(p, ignore_errors=True)
    return len(stale)


def write_cell(final: str | os.PathLike, write_into, *, replace: bool = False) -> bool:
    """Write a run directory atomically: `write_into(tmp_dir)` fills a hidden temporary
    directory next to `final`, which is then renamed to `final`. A complete `final` is kept
    and False returned (another worker finished it first) unless `replace`; an incomplete
    one is replaced. The temporary directory is removed either way.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp, old = (final.parent / f"{TMP_PREFIX}{tag}{final.name}-{os.getpid()}" for tag in ("", "old-"))
    for p in (tmp, old):
        shutil.rmtree(p, ignore_errors=True)
    try:
        write_into(tmp)
        os.chmod(tmp, validate.dir_mode())  # as mkdir under the user's umask (mkdtemp gives 0700)
        if final.is_dir() and (replace or not (final / "run.json").is_file()):
            os.rename(final, old)
        try:
            os.rename(tmp, final)
        except OSError:
            if final.is_dir():
                return False
            raise
    finally:
        for p in (tmp, old):
            shutil.rmtree(p, ignore_errors=True)
    return True


def write_failure(root: str | os.PathLike, cell_id: str, text: str) -> Path:
    """Record a failed cell's log (atomic replace); returns the log path."""
    d = Path(root) / FAILED / cell_id
    d.mkdir(parents=True, exist_ok=True)
    path = d / "log.txt"
    tmp = d / f"{TMP_PREFIX}log-{os.getpid()}"
    tmp.write_text(text)
    os.replace(tmp, path)
    return path


def clear_failure(root: str | os.PathLike, cell_id: str) -> None:
    shutil.rmtree(Path(root) / FAILED / cell_id, ignore_errors=True)
