"""Run records (SPEC §7): config hashing, versions, the run directory (`train.parquet`,
`eval.parquet`, `run.json`; names in `hbsim.contract`) written atomically and read back,
and a grid's complete cells read into one table (`load_cells`, `collect_cells`).

A run directory is complete when its `run.json` exists: it is always written last.
Every reader lists folders with `hbsim.contract.atomic.visible` / `find_files` (never a hidden or
temporary entry a killed writer left; re-exported here).
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import metadata
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from hbsim.contract import shapes
from hbsim.contract import (CELLS, COUNTERFACTUAL_FILE, EVAL_FILE, FAILED, GRID_JSON, GROUPS_FILE, OPTIONAL_FILES,
                            RUN_FILES, RUN_JSON, TRAIN_FILE, TUNE_JSON)
from hbsim.contract.atomic import atomic_write, make_temp_dir, remove_temp, visible, write_dir_atomic
from policies.errors import UserError
from policies.validate import MAX_STEPS

#: rollouts per group a groups table may name (`size`)
MAX_GROUP_SIZE = 1_000_000


@dataclass
class RunResult:
    """train: one row per step; eval: one row per attempt; meta: the run.json content;
    groups: one row per generated group (GROUP_COLUMNS), None where the trainer reports none."""

    train: pd.DataFrame
    eval: pd.DataFrame
    meta: dict = field(default_factory=dict)
    counterfactual: pd.DataFrame | None = None   # with --counterfactual (hbsim.counterfactual)
    groups: pd.DataFrame | None = None           # GROUPS_FILE (hbsim.loop.group_frame)


def _jsonable(value):
    """numpy scalars/arrays -> python; non-finite floats -> None (canonical JSON has no NaN)."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return [_jsonable(v) for v in value.tolist()]
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    return value


def canonical_json(obj) -> str:
    """Sorted keys, no whitespace, numpy values converted."""
    return json.dumps(_jsonable(obj), sort_keys=True, separators=(",", ":"), allow_nan=False)


def config_hash(config: dict) -> str:
    """First 16 hex characters of the sha256 of the canonical JSON of `config`."""
    return hashlib.sha256(canonical_json(config).encode()).hexdigest()[:16]


def versions() -> dict:
    """python, numpy, pandas, pyarrow, harnessbandit, and torch when it is already imported."""
    out = dict(_static_versions())
    if "torch" in sys.modules:
        out["torch"] = getattr(sys.modules["torch"], "__version__", None)
    return out


@lru_cache(maxsize=1)
def _static_versions() -> tuple:
    out = {"python": platform.python_version(), "numpy": np.__version__, "pandas": pd.__version__}
    for dist in ("pyarrow", "harnessbandit"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return tuple(out.items())


def is_complete(run_dir) -> bool:
    return (Path(run_dir) / RUN_JSON).is_file()


def fill_run_dir(result, folder: Path) -> None:
    """The files of `result` (a RunResult) written into the existing `folder`, run.json last."""
    result.train.to_parquet(folder / TRAIN_FILE, index=False)
    result.eval.to_parquet(folder / EVAL_FILE, index=False)
    if getattr(result, "groups", None) is not None:
        result.groups.to_parquet(folder / GROUPS_FILE, index=False)
    if getattr(result, "counterfactual", None) is not None:
        result.counterfactual.to_parquet(folder / COUNTERFACTUAL_FILE, index=False)
    (folder / RUN_JSON).write_text(json.dumps(_jsonable(result.meta), indent=1, sort_keys=True) + "\n")


def write_run(result, out, *, overwrite: bool = False) -> Path:
    """Write `result` (a RunResult) to the run directory `out`, atomically.

    A fresh `out` is written by `hbsim.contract.atomic.write_dir_atomic` (a temporary directory
    renamed into place); an existing incomplete `out` (e.g. `hb real`'s folder holding its
    checkpoints) receives the files one atomic replace at a time, run.json last. An existing
    complete run directory raises UserError unless `overwrite`. The run directory gets the
    mode a plain mkdir would (the user's umask).
    """
    out = Path(out)
    if is_complete(out) and not overwrite:
        raise UserError(f"run directory {str(out)!r} already holds a complete run; "
                        f"choose another --out or allow overwriting")
    if not out.exists():
        write_dir_atomic(out, lambda folder: fill_run_dir(result, folder), keep=is_complete)
        return out
    tmp = make_temp_dir(out)
    try:
        fill_run_dir(result, tmp)
        if is_complete(out):
            os.remove(out / RUN_JSON)            # the directory is incomplete until the end
        for name in OPTIONAL_FILES:
            if (out / name).exists() and not (tmp / name).exists():
                os.remove(out / name)             # a stale table of an overwritten run
        for name in (*OPTIONAL_FILES, *RUN_FILES):
            if (tmp / name).exists():
                os.replace(tmp / name, out / name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def read_meta(run_dir) -> dict | None:
    """The run record (run.json) of a run directory; None when it has none."""
    path = Path(run_dir) / RUN_JSON
    if not path.is_file():
        return None
    meta = shapes.read_record(path, None, "run record", "expected the JSON object hb writes (SPEC §7)")
    if not isinstance(meta, dict):
        raise UserError(f"{path}: unreadable run record (a JSON {type(meta).__name__}); expected the JSON "
                        "object hb writes (SPEC §7)")
    remedy = "expected the JSON object hb writes (SPEC §7): remove the run directory and run it again"
    shapes.check(path, meta, shapes.RUN_RECORD, "run record", remedy)
    if meta.get("grid") is not None:
        shapes.check(path, meta["grid"], shapes.RUN_GRID, "run record", remedy, "grid.")
    if meta.get("config") is not None:
        shapes.check(path, meta["config"], shapes.RUN_CONFIG, "run record", remedy, "config.")
    return meta


def read_tune(root) -> dict | None:
    """The selection record DIR/tune.json of a tuned grid (`ablations.tune` writes it), shape
    checked (`hbsim.contract.shapes.TUNE_RECORD`, each design's `TUNE_DESIGN`); None when absent. Every
    reader of tune.json (hb grid run and status, hb report) reads it here, before its work."""
    path = Path(root) / TUNE_JSON
    if not path.exists() and not path.is_symlink():
        return None
    remedy = "remove it and rerun `hb grid run` (the finished tuning cells are kept)"
    record = shapes.read_record(path, None, "tuning record", remedy)
    if isinstance(record, dict) and set(record) == {"parts"}:       # a grid of parts: a record per tuned part
        shapes.check(path, record, {"parts": dict}, "tuning record", remedy)
        for part, one in record["parts"].items():
            shapes.check(path, one, shapes.TUNE_RECORD, "tuning record", remedy, f"parts.{part}.")
            shapes.each(path, one["designs"], shapes.TUNE_DESIGN, "tuning record", remedy, f"parts.{part}.designs")
        return record
    shapes.check(path, record, shapes.TUNE_RECORD, "tuning record", remedy)
    shapes.each(path, record["designs"], shapes.TUNE_DESIGN, "tuning record", remedy, "designs")
    return record


#: what every table of a run directory read back must hold (`read_table`): the columns its
#: readers index, the first step number (an eval row of step 0 is the evaluation before
#: training), whether a step has one row only (train: SPEC §7), the columns whose values are a
#: share of successes, in [0, 1], the columns of flags (true or false) and the optional columns
#: of changes of such shares, in [-1, 1] or NaN (a probe that measured nothing)
TABLE_SCHEMA = {
    TRAIN_FILE: {"columns": ("step",), "first_step": 1, "unique_step": True, "shares": (), "flags": (), "changes": ()},
    EVAL_FILE: {"columns": ("step", "suite", "task", "harness", "success"), "first_step": 0, "unique_step": False,
                "shares": ("success",), "flags": (), "changes": ()},
    GROUPS_FILE: {"columns": ("step", "harness", "size", "success", "retained"), "first_step": 1,
                  "unique_step": False, "shares": ("success",), "flags": ("retained",), "changes": ()},
    COUNTERFACTUAL_FILE: {"columns": ("step", "harness", "arm"), "first_step": 1, "unique_step": False, "shares": (),
                          "flags": (), "changes": ("real_train", "real_heldout_tasks", "real_heldout_harness")},
}


def table_error(path, column: str, problem: str, allowed: str) -> UserError:
    """The one line of a table that is not what hb writes: file, column, what is wrong, what is allowed."""
    return UserError(f"{str(path)!r}: column {column!r} {problem}; allowed: {allowed} (SPEC §7: not a table hb "
                     "wrote; remove its run directory, or rerun it)")


def check_columns(path, frame: pd.DataFrame, columns) -> None:
    """UserError naming the first of `columns` that `frame` (read from `path`) lacks."""
    for column in columns:
        if column not in frame.columns:
            raise table_error(path, column, "is missing", f"a table holding {', '.join(columns)}")


def check_steps(path, values, first: int, last: int = MAX_STEPS, column: str = "step") -> None:
    """Every value of a step column finite, a whole number, in [first, last]."""
    v = pd.to_numeric(pd.Series(values), errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(v) | (v != np.round(v)) | (v < first) | (v > last)
    if bad.any():
        i = int(np.argmax(bad))
        raise table_error(path, column, f"holds {_plain(values[i])!r} (row {i})", f"whole numbers in [{first}, {last}]")


def check_range(path, values, column: str, low: float = 0.0, high: float = 1.0, *, nan: bool = False) -> None:
    """Every value of `column` finite and in [low, high] (a share of successes by default);
    `nan`: NaN allowed too (a measurement that was not made)."""
    v = pd.to_numeric(pd.Series(values), errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(v) | (v < low) | (v > high)
    if nan:
        bad &= ~np.isnan(v)
    if bad.any():
        i = int(np.argmax(bad))
        allowed = f"finite numbers in [{low:g}, {high:g}]" if math.isfinite(high) else f"finite numbers >= {low:g}"
        raise table_error(path, column, f"holds {_plain(values[i])!r} (row {i})", allowed + (" or NaN" if nan else ""))


def check_flags(path, values, column: str) -> None:
    """Every value of a flag column (a group's `retained`) true or false."""
    bad = ~pd.Series(values).isin([True, False]).to_numpy()
    if bad.any():
        i = int(np.argmax(bad))
        raise table_error(path, column, f"holds {_plain(values[i])!r} (row {i})", "true or false")


def check_unique_steps(path, values) -> None:
    """A table of one row per step (train, SPEC §7): no step number twice."""
    twice = pd.Series(values).duplicated().to_numpy()
    if twice.any():
        i = int(np.argmax(twice))
        first = int(np.argmax(pd.Series(values).to_numpy() == values[i]))
        raise table_error(path, "step", f"holds {_plain(values[i])!r} twice (rows {first} and {i})",
                          "one row per step")


def _plain(value):
    """A numpy scalar as the Python value it holds (for messages)."""
    return value.item() if isinstance(value, np.generic) else value


def read_table(path) -> pd.DataFrame:
    """The table `path` of a run directory (TRAIN_FILE, EVAL_FILE, GROUPS_FILE,
    COUNTERFACTUAL_FILE), checked against TABLE_SCHEMA before any reader uses it: readable
    parquet, every required column, step numbers whole, finite and in [first step,
    MAX_STEPS] (once each in a train table), successes in [0, 1], flags true or false, a
    probe's changes of success in [-1, 1] or NaN. The one reader of a run's tables read back (`read_run`:
    `hb sim --out` reuse, `hb twin fit`); anything else is one line naming the file, the
    column and what is allowed (`table_error`)."""
    path = Path(path)
    try:
        frame = pd.read_parquet(path)
    except (OSError, ValueError, pa.ArrowException) as exc:     # missing, truncated, not parquet
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UserError(f"{str(path)!r} is missing or not a readable parquet table ({first[:200]}); allowed: the "
                        "parquet table hb writes (remove its run directory, or rerun it)") from None
    schema = TABLE_SCHEMA.get(path.name)
    if schema is None:
        return frame
    check_columns(path, frame, schema["columns"])
    check_steps(path, frame["step"].to_numpy(), schema["first_step"])
    if schema["unique_step"]:
        check_unique_steps(path, frame["step"].to_numpy())
    for column in schema["shares"]:
        check_range(path, frame[column].to_numpy(), column)
    for column in schema["flags"]:
        check_flags(path, frame[column].to_numpy(), column)
    for column in schema["changes"]:
        if column in frame.columns:
            check_range(path, frame[column].to_numpy(), column, -1.0, 1.0, nan=True)
    if "size" in schema["columns"]:
        check_steps(path, frame["size"].to_numpy(), 1, MAX_GROUP_SIZE, "size")
    return frame


def read_run(run_dir):
    """Read a complete run directory back into a RunResult, every table checked (`read_table`)."""
    run_dir = Path(run_dir)
    meta = read_meta(run_dir)
    if meta is None:
        raise UserError(f"run directory {str(run_dir)!r} has no {RUN_JSON} (not a complete run)")
    cf, groups = run_dir / COUNTERFACTUAL_FILE, run_dir / GROUPS_FILE
    return RunResult(train=read_table(run_dir / TRAIN_FILE), eval=read_table(run_dir / EVAL_FILE), meta=meta,
                     counterfactual=read_table(cf) if cf.is_file() else None,
                     groups=read_table(groups) if groups.is_file() else None)


# -- a grid's record and its cells ----------------------------------------------------------
def read_grid_record(root) -> dict | None:
    """DIR/grid.json of a grid directory, shape checked (`hbsim.contract.shapes.GRID_RECORD`): the grid's
    name, every name admitted by --force, its spec and `planned`, the cells its last `hb grid run`
    planned ([id, label, seed] each); None when absent. The one reader of grid.json."""
    path = Path(root) / GRID_JSON
    if not path.exists():
        return None
    record = shapes.read_record(path, None, "grid record", "expected the JSON object hb writes")
    remedy = "expected the JSON object hb writes (name, names, spec): remove it, or the folder, and run again"
    shapes.check(path, record, shapes.GRID_RECORD, "unreadable grid record", remedy)
    shapes.check(path, record.get("spec") or {}, shapes.GRID_SPEC, "unreadable grid record", remedy, "spec.")
    shapes.strings(path, record.get("names") or [], "unreadable grid record", remedy, "names")
    for i, entry in enumerate(record.get("planned") or []):
        if not (isinstance(entry, list) and len(entry) == 3 and isinstance(entry[0], str)):
            raise UserError(f"{path}: unreadable grid record of the wrong shape (planned[{i}]={str(entry)[:40]} is "
                            f"not [id, label, seed]); {remedy}")
    return record


def missing_cells(root, planned: list | None = None) -> list[tuple]:
    """The planned cells of grid directory `root` with no result (neither complete nor failed:
    an `hb grid run` killed or stopped before them), as (id, label, seed); `planned` defaults to
    grid.json's (`read_grid_record`; [] for a grid recorded before hb kept it)."""
    if planned is None:
        planned = (read_grid_record(root) or {}).get("planned") or []
    have = done_ids(root) | {p.name for p in visible(Path(root) / FAILED) if p.is_dir()}
    return [tuple(cell) for cell in planned if cell[0] not in have]


def missing_line(root, missing: list[tuple]) -> str:
    """One line naming the missing cells of a grid (the first three) and how to finish it."""
    shown = ", ".join(f"{label} seed {seed} ({cell_id})" for cell_id, label, seed in missing[:3])
    more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
    return (f"grid directory {str(root)!r} is unfinished: {len(missing)} planned cell(s) have no result: {shown}{more}; "
            f"rerun `hb grid run` on its grid file to finish it (`hb grid status {root}` lists them)")


# -- a grid's cells, read into one table ---------------------------------------------------
def done_ids(root) -> set[str]:
    """Ids of the complete cells of grid directory `root` (hidden temporary folders excluded)."""
    return {p.name for p in visible(Path(root) / CELLS) if p.is_dir()}


def load_cells(root, only: set[str] | None = None,
               eval_columns: list[str] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(train_df, eval_df) of the complete cells of a grid directory (SPEC §7 + sweep columns).

    Rows come in a fixed order (cells sorted by id, each cell's rows as it wrote them),
    and every sweep key of the grid becomes a column (`env.drift`, `policy.window`; empty
    where a sweep key does not apply to a cell's policy), so the frames do not depend on
    which worker finished first or how often the grid was interrupted. `only`: keep just
    these cell ids. eval_columns: read only these eval columns (the eval table is the large
    one; the sweep columns are added either way). Raises UserError when no cell is left,
    or when two cells carry the same (policy label, seed) with different configs (an
    edited grid file reusing a label).
    """
    root = Path(root)
    if not root.is_dir():
        raise UserError(f"grid directory {root}: not found")
    ids = sorted(i for i in done_ids(root) if only is None or i in only)
    if not ids:
        raise UserError(f"grid directory {root}: holds no finished cell (run `hb grid run` first)")
    metas = {i: read_meta(root / CELLS / i) or {} for i in ids}     # a cell is renamed in complete
    _check_unmixed(root, metas)
    sweeps = [metas[i].get("grid", {}).get("sweep", {}) for i in ids]
    sweep_keys = sorted({k for sweep in sweeps for k in sweep})
    frames = []
    for name, columns in ((TRAIN_FILE, None), (EVAL_FILE, eval_columns)):
        tables = _read_tables([root / CELLS / i / name for i in ids], columns)
        df = pa.concat_tables(tables, promote_options="default").to_pandas()
        counts = [t.num_rows for t in tables]
        for key in sweep_keys:  # constant per cell; absent where the key does not apply
            per_cell = [_column_value(sweep.get(key)) for sweep in sweeps]
            df[key] = pd.Series(np.repeat(np.array(per_cell, dtype=object), counts).tolist(), index=df.index)
        frames.append(df)
    return frames[0], frames[1]


def collect_cells(root, only: set[str] | None = None) -> tuple[Path, Path]:
    """Write DIR/train.parquet and DIR/eval.parquet of the cells (atomically); returns their paths."""
    root = Path(root)
    train, evals = load_cells(root, only=only)
    remove_temp(root)       # the temporaries of a collect that was killed
    return tuple(atomic_write(root / name, lambda tmp, df=df: df.to_parquet(tmp, index=False))
                 for name, df in ((TRAIN_FILE, train), (EVAL_FILE, evals)))


def _read_tables(paths: list[Path], columns: list[str] | None = None) -> list[pa.Table]:
    """Read parquet files on a few threads (arrow releases the GIL); order kept. The
    pandas metadata is dropped so the concatenation gets one fresh RangeIndex."""
    def read(path: Path) -> pa.Table:
        try:
            return pq.read_table(path, columns=columns).replace_schema_metadata(None)
        except (OSError, ValueError) as exc:  # missing, truncated, not parquet (ArrowInvalid is a ValueError)
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise UserError(f"{str(path)!r} is missing or not a readable parquet table ({first[:200]}); "
                            f"remove its cell folder {str(path.parent)!r} and run `hb grid run` again") from None
    with ThreadPoolExecutor(max_workers=min(8, len(paths))) as pool:
        return list(pool.map(read, paths))


def _column_value(value):
    if isinstance(value, (list, dict)):
        return json.dumps(value, separators=(",", ":"))
    return value


def _check_unmixed(root: Path, metas: dict[str, dict]) -> None:
    seen: dict[tuple, str] = {}
    for cell_id, meta in metas.items():
        grid = meta.get("grid", {})
        key = (grid.get("label", meta.get("label")), grid.get("seed", meta.get("seed")))
        if key in seen:
            other = seen[key]
            raise UserError(f"grid directory {root}: cells {other} and {cell_id} both hold policy={key[0]!r} "
                            f"seed={key[1]} with different configs (the grid file changed); "
                            "collect with --current to keep the cells of the last grid file")
        seen[key] = cell_id
