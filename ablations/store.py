"""The grid directory on disk (its layout: `hbsim.contract`): its grid record, atomic
cells, failure logs, and its collected tables with the grid file in mind (`current`).

A cell is written into a temporary directory and renamed into place only when
complete, so `cells/<id>/` either holds a complete result or does not exist, whatever
moment the runner or a worker is killed at.
"""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from ablations.plan import GridSpec
from ablations.spec import parse_spec
from ablations.tune import is_tuned, recorded_test_spec
from hbsim.contract import atomic, folders, markers
from hbsim.contract import CELL_PROGRESS, CELLS, FAILED, GRID_JSON, LOG, RUNNING, TUNE_DIR, TUNE_JSON
from hbsim.contract.records import collect_cells, done_ids, missing_line, read_grid_record
from hbsim.contract.records import missing_cells as records_missing_cells
from hbsim.contract.shapes import CELL_PROGRESS_RECORD, read_record
from policies.errors import UserError


def failed_ids(root: str | os.PathLike) -> set[str]:
    """Ids with a failure log and no complete result."""
    return {p.name for p in atomic.visible(Path(root) / FAILED) if p.is_dir()} - done_ids(root)


def failure_log(root: str | os.PathLike, cell_id: str) -> Path:
    return Path(root) / FAILED / cell_id / LOG


def failure_reason(root: str | os.PathLike, cell_id: str) -> str:
    """The last non-empty line of a failure's log (the exception line of a traceback)."""
    try:
        lines = [ln for ln in failure_log(root, cell_id).read_text().splitlines() if ln.strip()]
    except OSError:
        return "(no log)"
    return lines[-1].strip() if lines else "(empty log)"





def running_line(root: str | os.PathLike, cell_id: str) -> str:
    """What a real cell still running (or killed) reached, from DIR/running/<id>/progress.json:
    'step 7/30, last step 41.2 s, at 2026-12-06 10:31:05' ('' when it has none; a record of
    the wrong shape is named, never a traceback: status only reports)."""
    path = Path(root) / RUNNING / cell_id / CELL_PROGRESS
    if not path.is_file():
        return ""
    try:
        p = read_record(path, CELL_PROGRESS_RECORD, "cell progress record", "it is rewritten at the cell's next step")
    except UserError:
        return f"progress unreadable ({path})"
    return f"step {p['step']}/{p['steps']}, last step {p['seconds_step']:.1f} s, at {p['time']}"


def recorded_spec(root: str | os.PathLike) -> GridSpec:
    """The grid file recorded last in DIR/grid.json (a tuned grid's: its test phase)."""
    record = read_grid_record(root)
    if record is None:
        raise UserError(f"grid directory {root}: no {GRID_JSON} (not a grid directory)")
    spec = record.get("spec", {})
    spec = parse_spec(spec.get("raw", {}), spec.get("path", str(Path(root) / GRID_JSON)))
    if is_tuned(spec):            # a tuned grid's DIR/cells are its test phase (ablations.tune)
        return recorded_test_spec(spec, root)
    return spec


def collect(root: str | os.PathLike, current: bool = False) -> tuple[Path, Path]:
    """Write DIR/train.parquet and DIR/eval.parquet of the complete cells (atomically; `current`:
    only those of the grid file recorded last, `hb grid collect --current`); returns their paths.
    The grid's marker lists them (`hbsim.contract.markers.output_dir`: claimed, then completed).
    The marker also lists the grid's complete cells and its records (grid.json, tune.json,
    tune/: hb's, whether or not the `hb grid run` that wrote them finished), and stays
    "incomplete" while a planned cell has no result (a killed or unfinished run; a warning
    line names them: `missing_cells`)."""
    root = Path(root)
    if current:
        planned = recorded_spec(root).cells()
    else:
        try:
            planned = recorded_spec(root).cells()
        except UserError:           # a recorded grid file this hb cannot plan (e.g. an unloaded plugin): the cells as they are
            planned = []
    only = {c.id for c in planned} if current else None
    missing = missing_cells(root, planned)
    with markers.output_dir(root, "grid", tool="hb grid collect", finished=lambda: not missing):
        paths = collect_cells(root, only=only)       # first: a refusal here leaves the marker as it was
        for cell in sorted(done_ids(root)):
            atomic.record_written(root / CELLS / cell)
        for name in (GRID_JSON, TUNE_JSON, TUNE_DIR):
            if (root / name).exists():
                atomic.record_written(root / name)
    if missing:
        print(f"warning: {missing_line(root, missing)}", file=sys.stderr)
    return paths


def missing_cells(root: str | os.PathLike, planned=None) -> list[tuple]:
    """The planned cells of grid directory `root` with no result, (id, label, seed) each
    (`hbsim.contract.records.missing_cells`), planned by the grid file recorded last (`recorded_spec`)
    unless `planned` (GridSpec cells) is given."""
    planned = recorded_spec(root).cells() if planned is None else planned
    return records_missing_cells(root, [[c.id, c.label, c.seed] for c in planned])


def open_grid(root: str | os.PathLike, name: str, spec: dict, *, force_mixed: bool = False,
              planned: list | None = None) -> None:
    """Create DIR (if needed) and record the grid; refuse a different grid's DIR, a folder
    of another kind and a non-empty folder hb did not create (`hbsim.contract.folders`), unless
    `force_mixed` (`--force`).

    Call only after every input has been validated: this is the first write to DIR.
    """
    root = Path(root)
    folders.check_output_dir(root, "grid", force=force_mixed)
    record = read_grid_record(root)
    names = list(record.get("names", [record.get("name")])) if record else []
    if record is not None and name not in names and not force_mixed:
        raise UserError(f"--out {root}: holds cells of grid {record.get('name')!r}, not {name!r}; "
                        "use another --out or pass --force")
    if record is None and atomic.visible(root / CELLS) and not force_mixed:
        raise UserError(f"--out {root}: holds cells but no {GRID_JSON}; pass --force to add to it")
    root.mkdir(parents=True, exist_ok=True)
    markers.claim_output_dir(root, "grid", tool="hb grid run")
    (root / CELLS).mkdir(exist_ok=True)
    if name not in names:
        names.append(name)
    new = {"name": names[0], "names": names, "spec": spec}
    planned = planned if planned is not None else (record or {}).get("planned")
    if planned is not None:           # the cells this grid's run plans ([id, label, seed]): what `hb report` names missing
        new["planned"] = planned
    if new != record:
        atomic.write_json_atomic(root / GRID_JSON, new)
    else:
        atomic.record_written(root / GRID_JSON)      # written by an earlier (maybe killed) call: the marker lists it





def write_failure(root: str | os.PathLike, cell_id: str, text: str) -> Path:
    """Record a failed cell's log (atomic replace); returns the log path."""
    path = failure_log(root, cell_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    return atomic.atomic_write(path, text)


def clear_failure(root: str | os.PathLike, cell_id: str) -> None:
    shutil.rmtree(Path(root) / FAILED / cell_id, ignore_errors=True)
