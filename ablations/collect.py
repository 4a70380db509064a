"""Reading a grid directory back: every complete cell's tables, concatenated.

Rows come in a fixed order (cells sorted by id, each cell's rows as it wrote them),
and every sweep key of the grid becomes a column (`env.drift`, `policy.window`; empty
where a sweep key does not apply to a cell's policy), so the frames do not depend on
which worker finished first or how often the grid was interrupted.
"""
from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from ablations import store
from policies.errors import UserError


def _cell_meta(cell: Path) -> dict:
    try:
        return json.loads((cell / "run.json").read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise UserError(f"{cell}/run.json: unreadable cell record ({exc})") from None


def cell_ids(root: str | os.PathLike, current: bool = False) -> list[str]:
    """Sorted ids of the complete cells (only those of the recorded grid file if `current`)."""
    ids = sorted(store.done_ids(root))
    if current:
        from ablations.spec import parse_spec
        record = store.read_grid_json(root) or {}
        raw = record.get("spec", {})
        spec = parse_spec(raw.get("raw", {}), raw.get("path", str(Path(root) / store.GRID_JSON)))
        wanted = {c.id for c in spec.cells()}
        ids = [i for i in ids if i in wanted]
    return ids


def load(root: str | os.PathLike, current: bool = False, only: set[str] | None = None,
         eval_columns: list[str] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(train_df, eval_df) of all complete cells of a grid directory (SPEC §7 + sweep columns).

    Raises ValueError when the directory holds no cell, or when two cells carry the same
    (policy label, seed) with different configs (an edited grid file reusing a label):
    pass current=True to keep only the cells of the grid file recorded last, or `only`
    (a set of cell ids) to keep just those. eval_columns: read only these eval columns
    (the eval table is the large one; the sweep columns are added either way).
    """
    root = Path(root)
    if not root.is_dir():
        raise UserError(f"grid directory {root}: not found")
    ids = cell_ids(root, current=current)
    if only is not None:
        ids = [i for i in ids if i in only]
    if not ids:
        raise UserError(f"grid directory {root}: holds no finished cell (run `hb grid run` first)")
    metas = {i: _cell_meta(root / store.CELLS / i) for i in ids}
    _check_unmixed(root, metas)
    sweeps = [metas[i].get("grid", {}).get("sweep", {}) for i in ids]
    sweep_keys = sorted({k for sweep in sweeps for k in sweep})
    frames = []
    for name in ("train", "eval"):
        tables = _read_tables([root / store.CELLS / i / f"{name}.parquet" for i in ids],
                              eval_columns if name == "eval" else None)
        df = pa.concat_tables(tables, promote_options="default").to_pandas()
        counts = [t.num_rows for t in tables]
        for key in sweep_keys:  # constant per cell; absent where the key does not apply
            per_cell = [_column_value(sweep.get(key)) for sweep in sweeps]
            df[key] = pd.Series(np.repeat(np.array(per_cell, dtype=object), counts).tolist(), index=df.index)
        frames.append(df)
    return frames[0], frames[1]


def _read_tables(paths: list[Path], columns: list[str] | None = None) -> list[pa.Table]:
    """Read parquet files on a few threads (arrow releases the GIL); order kept. The
    pandas metadata is dropped so the concatenation gets one fresh RangeIndex."""
    def read(path: Path) -> pa.Table:
        return pq.read_table(path, columns=columns).replace_schema_metadata(None)
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


def collect(root: str | os.PathLike, current: bool = False) -> tuple[Path, Path]:
    """Write DIR/train.parquet and DIR/eval.parquet (atomically); returns their paths."""
    root = Path(root)
    train, evals = load(root, current=current)
    paths = []
    for name, df in (("train", train), ("eval", evals)):
        path = root / f"{name}.parquet"
        tmp = root / f"{store.TMP_PREFIX}{name}-{os.getpid()}.parquet"
        df.to_parquet(tmp, index=False)
        os.replace(tmp, path)
        paths.append(path)
    return paths[0], paths[1]
