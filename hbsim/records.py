"""Run records (SPEC §7): config hashing, versions, and the run directory
(`train.parquet`, `eval.parquet`, `run.json`), written atomically.

A run directory is complete when its `run.json` exists: it is always written last.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import metadata
from pathlib import Path

import numpy as np
import pandas as pd
from policies.errors import UserError
from policies.validate import dir_mode

RUN_FILES = ("train.parquet", "eval.parquet", "run.json")
#: written next to them by runs with --counterfactual (hbsim.counterfactual, SPEC §7)
COUNTERFACTUAL_FILE = "counterfactual.parquet"


@dataclass
class RunResult:
    """train: one row per step; eval: one row per attempt; meta: the run.json content."""

    train: pd.DataFrame
    eval: pd.DataFrame
    meta: dict = field(default_factory=dict)
    counterfactual: pd.DataFrame | None = None   # with --counterfactual (hbsim.counterfactual)


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
    return (Path(run_dir) / "run.json").is_file()


def write_run(result, out, *, overwrite: bool = False) -> Path:
    """Write `result` (a RunResult) to the run directory `out`.

    The files are written into a temporary directory next to `out` and then moved in:
    a fresh `out` is renamed into place in one step; an existing incomplete `out` (e.g. a
    grid cell holding only its log) receives the files one atomic replace at a time,
    run.json last. An existing complete run directory raises UserError unless
    `overwrite`. The run directory gets the mode a plain mkdir would (the user's umask).
    """
    out = Path(out)
    if is_complete(out) and not overwrite:
        raise UserError(f"run directory {str(out)!r} already holds a complete run; "
                              f"choose another --out or allow overwriting")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        os.chmod(tmp, dir_mode())  # mkdtemp's 0700 ignores the umask
        result.train.to_parquet(tmp / "train.parquet", index=False)
        result.eval.to_parquet(tmp / "eval.parquet", index=False)
        if getattr(result, "counterfactual", None) is not None:
            result.counterfactual.to_parquet(tmp / COUNTERFACTUAL_FILE, index=False)
        (tmp / "run.json").write_text(json.dumps(_jsonable(result.meta), indent=1, sort_keys=True) + "\n")
        if not out.exists():
            os.rename(tmp, out)
            return out
        if is_complete(out):
            os.remove(out / "run.json")          # the directory is incomplete until the end
        if (out / COUNTERFACTUAL_FILE).exists() and not (tmp / COUNTERFACTUAL_FILE).exists():
            os.remove(out / COUNTERFACTUAL_FILE)  # a stale probe of an overwritten run
        for name in (COUNTERFACTUAL_FILE, *RUN_FILES):
            if (tmp / name).exists():
                os.replace(tmp / name, out / name)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def read_run(run_dir):
    """Read a complete run directory back into a RunResult."""
    run_dir = Path(run_dir)
    if not is_complete(run_dir):
        raise UserError(f"run directory {str(run_dir)!r} has no run.json (not a complete run)")
    meta = json.loads((run_dir / "run.json").read_text())
    cf = run_dir / COUNTERFACTUAL_FILE
    return RunResult(train=pd.read_parquet(run_dir / "train.parquet"),
                     eval=pd.read_parquet(run_dir / "eval.parquet"), meta=meta,
                     counterfactual=pd.read_parquet(cf) if cf.is_file() else None)
