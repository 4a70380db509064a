"""A grid directory's tables with its grid file in mind: `current=True` (`hb grid collect
--current`) keeps only the cells of the grid file recorded last, which takes the spec
parser, so it lives here; the reading itself is `hbsim.records.load_cells`.
"""
from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from ablations import store
from hbsim.contract import GRID_JSON
from hbsim.records import collect_cells, load_cells


def current_ids(root: str | os.PathLike) -> set[str]:
    """Ids of the cells of the grid file recorded last in DIR/grid.json."""
    from ablations.spec import parse_spec
    raw = (store.read_grid_json(root) or {}).get("spec", {})
    return {c.id for c in parse_spec(raw.get("raw", {}), raw.get("path", str(Path(root) / GRID_JSON))).cells()}


def load(root: str | os.PathLike, current: bool = False, only: set[str] | None = None,
         eval_columns: list[str] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(train_df, eval_df) of the complete cells (`hbsim.records.load_cells`); `current`:
    only those of the grid file recorded last; `only`: just these cell ids."""
    if current:
        only = current_ids(root) if only is None else current_ids(root) & set(only)
    return load_cells(root, only=only, eval_columns=eval_columns)


def collect(root: str | os.PathLike, current: bool = False) -> tuple[Path, Path]:
    """Write DIR/train.parquet and DIR/eval.parquet (atomically); returns their paths."""
    return collect_cells(root, only=current_ids(root) if current else None)
