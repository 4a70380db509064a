"""Reading a grid directory back: every complete cell's tables, concatenated.

Rows come in a fixed order (cells sorted by id, each cell's rows as it wrote them),
and every sweep key of the grid becomes a column (`env.drift`, `policy.window`; empty
where a sweep key does not apply to a cell's policy), so the frames do not depend on
which worker finished first or how often the grid was interrupted.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd

from ablations import store


def _cell_meta(cell: Path) -> dict:
    try:
        return json.loads((cell / "run.json").read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{cell}/run.json: unreadable cell record ({exc})") from None


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


def load(root: str | os.PathLike, current: bool = False) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(train_df, eval_df) of all complete cells of a grid directory (SPEC §7 + sweep columns).

    Raises ValueError when the directory holds no cell, or when two cells carry the same
    (policy label, seed) with different configs (an edited grid file reusing a label):
    pass current=True to keep only the cells of the grid file recorded last.
    """
    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"grid directory {root}: not found")
    ids = cell_ids(root, current=current)
    if not ids:
        raise ValueError(f"grid directory {root}: holds no finished cell (run `hb grid run` first)")
    metas = {i: _cell_meta(root / store.CELLS / i) for i in ids}
    _check_unmixed(root, metas)
    sweep_keys = sorted({k for m in metas.values() for k in m.get("grid", {}).get("sweep", {})})
    trains, evals = [], []
    for i in ids:
        cell = root / store.CELLS / i
        sweep = metas[i].get("grid", {}).get("sweep", {})
        for name, frames in (("train", trains), ("eval", evals)):
            df = pd.read_parquet(cell / f"{name}.parquet")
            for key in sweep_keys:
                if key in sweep:
                    df[key] = _column_value(sweep[key])
            frames.append(df)
    return _concat(trains, sweep_keys), _concat(evals, sweep_keys)


def _column_value(value):
    if isinstance(value, (list, dict)):
        return json.dumps(value, separators=(",", ":"))
    return value


def _concat(frames: list[pd.DataFrame], sweep_keys: list[str]) -> pd.DataFrame:
    df = pd.concat(frames, ignore_index=True, sort=False)
    for key in sweep_keys:
        if key not in df.columns:  # pragma: no cover - every sweep key is in some cell
            df[key] = None
    cols = [c for c in df.columns if c not in sweep_keys] + sweep_keys
    return df[cols]


def _check_unmixed(root: Path, metas: dict[str, dict]) -> None:
    seen: dict[tuple, str] = {}
    for cell_id, meta in metas.items():
        grid = meta.get("grid", {})
        key = (grid.get("label", meta.get("label")), grid.get("seed", meta.get("seed")))
        if key in seen:
            other = seen[key]
            raise ValueError(f"grid directory {root}: cells {other} and {cell_id} both hold policy={key[0]!r} "
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
