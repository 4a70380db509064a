"""Read and validate the run files of SPEC §7 (the only input of `reports`; names and the
run record reader are `hbsim.contract` and `hbsim.contract.records`).

A directory is either a collected grid / single run directory holding ``eval.parquet``
(and ``train.parquet``), or a grid whose run directories are ``DIR/cells/*/``,
``DIR/*/`` or ``DIR/*/*/`` (each with ``eval.parquet``, ``train.parquet``, ``run.json``).
Validation raises UserError naming the field, the value and what is allowed. A grid of
parts (`hb stress`: one part per scenario, each with its own environment) is read one part
at a time (`part`: its rows, its labels without the `[part=NAME]` suffix).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from hbsim.contract import (BUDGET_UNIT, CELLS, EVAL_FILE, EVAL_TABLE, PART, ROW_KEYS, RUN_JSON, TRAIN_FILE,
                            VALIDATION_SUITE)
from hbsim.contract.labels import part_suffix
from hbsim.contract.atomic import find_files, visible
from hbsim.contract.records import read_meta
from policies.errors import UserError

#: of the eval columns the loader needs (EVAL_TABLE), `step` is optional (absent: one final evaluation, step 0)
EVAL_OPTIONAL = ("step",)


@dataclass
class Frames:
    """What a report is built from.

    eval_all: every eval row (all steps); eval: the final evaluation of each run
    train: the train rows (None when no train table exists)
    runs: run.json contents by run_id (may be empty for collected tables)
    source: where the frames came from
    part: the part of a grid of parts they hold (None: a plain grid or run)
    """

    eval_all: pd.DataFrame
    eval: pd.DataFrame
    train: pd.DataFrame | None = None
    runs: dict = field(default_factory=dict)
    source: str = "frames"
    part: str | None = None


def _parquet(path: Path) -> pd.DataFrame:
    """One table, as `pd.read_parquet` gives it (same dtypes and index), read in this
    thread: a run's file is small, and pyarrow's dataset discovery and thread pool cost
    more than the read (320 files: 1.9 s -> 0.6 s)."""
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(path).read(use_threads=False).to_pandas()
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UserError(f"{path.name}: {str(path)!r} is not a readable parquet table ({first})") from None


def _run_dirs(root: Path) -> list[Path]:
    found = {p for p in visible(root / CELLS) if (p / EVAL_FILE).is_file()}   # never hidden/temporary
    found.update(p.parent for p in find_files(root, EVAL_FILE, depth=2) if p.parent != root)
    return sorted(found)


def step_rows(ev: pd.DataFrame) -> pd.DataFrame:
    """The eval rows a report reads by default: neither a budget evaluation's rows (run knob
    `eval_budget`; `hb report --budget` selects those, reports.budget) nor the tuning split
    (suite `validation`, a grid's [tune] target)."""
    keep = ev["suite"].astype(str) != VALIDATION_SUITE if "suite" in ev.columns else None
    if BUDGET_UNIT in ev.columns:
        keep = ev[BUDGET_UNIT].isna() if keep is None else keep & ev[BUDGET_UNIT].isna()
    return ev if keep is None or keep.all() else ev[keep].reset_index(drop=True)


def read_dir(path: str | Path, extra: tuple[str, ...] = (),
             select: Callable[[pd.DataFrame], pd.DataFrame] = step_rows, part: str | None = None) -> Frames:
    """Read a grid / run directory into validated Frames (``extra``: eval columns to keep
    beyond the required ones, e.g. a swept knob; ``select``: the raw eval rows to keep,
    default `step_rows`; ``part``: only that part of a grid of parts, `one_part`)."""
    root = Path(path)
    if not root.is_dir():
        raise UserError(f"DIR: {str(root)!r} is not a directory; expected a grid or run directory")
    runs: dict = {}
    if (root / EVAL_FILE).exists():
        ev = _parquet(root / EVAL_FILE)
        tr = _parquet(root / TRAIN_FILE) if (root / TRAIN_FILE).exists() else None
        meta = read_meta(root)
        if meta:
            runs[str(meta.get("run_id"))] = meta
        for d in (p for p in visible(root / CELLS) if (p / RUN_JSON).is_file()):
            meta = read_meta(d)
            if meta:
                runs[str(meta.get("run_id"))] = meta
    else:
        dirs = _run_dirs(root)
        if not dirs:
            raise UserError(f"DIR: {str(root)!r} has no eval.parquet and no run directories "
                             "(DIR/cells/*/, DIR/*/, DIR/*/*/ with eval.parquet); nothing to report")
        evs, trs = [], []
        for d in dirs:
            evs.append(_parquet(d / EVAL_FILE))
            if (d / TRAIN_FILE).exists():
                trs.append(_parquet(d / TRAIN_FILE))
            meta = read_meta(d)
            if meta:
                runs[str(meta.get("run_id"))] = meta
        ev = pd.concat(evs, ignore_index=True)
        tr = pd.concat(trs, ignore_index=True) if trs else None
        del evs, trs                     # one copy of the rows while they are validated
        release_arrow()
    if part is not None:
        ev, tr, runs = one_part(ev, tr, runs, part)
    elif PART in ev.columns and len(part_names(ev)) > 1:
        raise UserError(f"DIR: {str(root)!r} holds a grid of parts ({part_names(ev)}), each part its own "
                        "environment and labels: report one part with --part NAME")
    frames = make_frames(select(ev), tr, runs=runs, source=str(root), extra=extra)
    frames.part = part
    del ev
    release_arrow()
    return frames


def part_names(ev: pd.DataFrame) -> list[str]:
    """The parts of a grid of parts' eval table (its `part` column), sorted."""
    return sorted(ev[PART].dropna().astype(str).unique())


def no_parts(part: str, why: str) -> UserError:
    """The refusal of `--part` where there are no parts (`why`: what shows it)."""
    return UserError(f"--part: got {part!r}, but {why}: only a collected grid of parts (hb stress, a grid file with "
                     "[[parts]]) has parts")


def one_part(ev: pd.DataFrame, tr: pd.DataFrame | None, runs: dict, part: str
             ) -> tuple[pd.DataFrame, pd.DataFrame | None, dict]:
    """The rows of part `part` of a grid of parts' raw tables, their policy labels without
    its `[part=NAME]` suffix (so `--baseline uniform` names its uniform), the train columns
    no row of the part fills (the other parts' harnesses) dropped, and its runs' records.
    UserError when the tables have no part column or not this part."""
    if PART not in ev.columns:
        raise no_parts(part, f"the eval table has no {PART!r} column")
    names = part_names(ev)
    if part not in names:
        raise UserError(f"--part: got {part!r}, allowed: one of {names}")
    suffix = part_suffix(part)

    def rows(df: pd.DataFrame) -> pd.DataFrame:
        df = df[(df[PART].astype(str) == part).to_numpy()].reset_index(drop=True)
        return df.assign(policy=df["policy"].astype(str).str.removesuffix(suffix))
    ev = rows(ev)
    if tr is not None and PART in tr.columns:
        tr = rows(tr)
        tr = tr.loc[:, tr.notna().any().to_numpy() | tr.columns.isin(ROW_KEYS)]
    ids = set(ev["run_id"].astype(str))
    return ev, tr, {rid: meta for rid, meta in runs.items() if rid in ids}


#: the eval table's label columns: categorical (sorted categories, so they group and sort as the strings)
LABELS = ("run_id", "policy", "suite", "task", "category", "harness")

#: the canonical row order of the eval table: every later aggregation sums in this order
ROW_ORDER = ("policy", "seed", "run_id", "step", "suite", "task", "attempt")


def _is_sorted(df: pd.DataFrame, keys) -> bool:
    """Whether the rows are in lexicographic order of ``keys`` (integer or categorical columns,
    compared row to row by value or code: no sorted copy of the table)."""
    undecided = np.ones(max(len(df) - 1, 0), dtype=bool)  # rows i, i + 1 equal on the keys so far
    for col in keys:
        c = df[col].cat.codes.to_numpy() if isinstance(df[col].dtype, pd.CategoricalDtype) else df[col].to_numpy()
        step = np.sign(np.diff(c))  # -1: row i + 1 sorts before row i on this key
        if (step[undecided] < 0).any():
            return False
        undecided &= step == 0
        if not undecided.any():
            break
    return True


def release_arrow() -> None:
    """Hand the pages of freed arrow buffers (the string columns) back to the system:
    pyarrow's allocator keeps them, and the copies of a large eval table then add up
    (20 seeds x 2,000 tasks: 170 MB of the peak)."""
    import pyarrow as pa

    pa.default_memory_pool().release_unused()


def make_frames(eval_df: pd.DataFrame, train_df: pd.DataFrame | None = None, *, runs: dict | None = None,
                source: str = "frames", extra: tuple[str, ...] = ()) -> Frames:
    """Validate raw tables and select the final evaluation (largest step per run_id)."""
    ev = validate_eval(step_rows(eval_df), extra)
    tr = validate_train(train_df) if train_df is not None and len(train_df) else None
    last = ev.groupby("run_id")["step"].transform("max")
    is_final = (ev["step"] == last).to_numpy()
    # one evaluation per run (the usual case): the same rows, shared copy-on-write
    final = ev.copy(deep=False) if is_final.all() else ev[is_final].reset_index(drop=True)
    _check_one_run_per_policy_seed(final)
    _check_attempts(final)
    return Frames(eval_all=ev, eval=final, train=tr, runs=dict(runs or {}), source=source)


def validate_eval(df: pd.DataFrame, extra: tuple[str, ...] = ()) -> pd.DataFrame:
    """The required columns (plus ``extra``), typed and checked; other columns are dropped.
    Without a `step` column every run has one evaluation, given step 0."""
    need = [c for c in EVAL_TABLE if c not in EVAL_OPTIONAL]
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise UserError(f"eval table: missing column(s) {missing}; required: {need} (optional: "
                        f"{list(EVAL_OPTIONAL)})")
    absent = [c for c in extra if c not in df.columns or "." not in str(c)]   # a knob column: env.X, policy.X
    if absent:
        knobs = sorted(c for c in df.columns if "." in str(c))
        raise UserError(f"--axis: got {absent[0]!r}, allowed: a swept knob column of the collected eval table "
                        f"({knobs if knobs else 'none: collect a grid with a sweep (hb grid collect)'})")
    if len(df) == 0:
        raise UserError("eval table: has no rows; expected one row per attempt")
    ev = df.loc[:, [c for c in EVAL_TABLE if c in df.columns] + list(extra)]   # copy-on-write: no copy of df yet
    if "step" not in ev.columns:
        ev["step"] = 0
    for col in ("run_id", "policy", "suite", "task", "category", "harness"):
        ev[col] = ev[col].astype(str)
    for col in ("seed", "step", "attempt"):
        ev[col] = _as_int(ev[col], f"eval.{col}")
    reward = pd.to_numeric(ev["reward"], errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(reward) | (reward < 0) | (reward > 1)
    if bad.any():
        raise UserError(f"eval.reward: got {float(reward[bad][0])!r} (task {ev['task'].to_numpy()[bad][0]!r}, "
                         f"{int(bad.sum())} bad row(s)); allowed: finite floats in [0, 1]")
    ev["reward"] = reward
    succ = ev["success"]
    if succ.dtype != bool:
        vals = pd.to_numeric(succ, errors="coerce")
        if vals.isna().any() or not vals.isin([0, 1]).all():
            raise UserError(f"eval.success: got {succ[~vals.isin([0, 1])].iloc[0]!r}; allowed: booleans (or 0/1)")
        succ = vals.astype(bool)
    ev["success"] = succ.astype(bool)
    # labels as categoricals first (sorted categories: they sort and group as the strings), so that
    # the sort moves codes, not strings (20 seeds x 2,000 tasks: 100 MiB less than the string table)
    for col in LABELS:
        ev[col] = ev[col].astype("category")
    # a canonical row order: every later aggregation sums in the same order (joins are by ids)
    if not _is_sorted(ev, ROW_ORDER):
        ev = ev.sort_values(list(ROW_ORDER), kind="stable")
    ev = ev.reset_index(drop=True)
    dup = ev.duplicated(["run_id", "step", "suite", "task", "attempt"])
    if dup.any():
        r = ev[dup].iloc[0]
        raise UserError(f"eval table: duplicate attempt {int(r['attempt'])} of task {r['task']!r} "
                         f"(run {r['run_id']!r}, step {int(r['step'])}); allowed: one row per attempt")
    return ev


def _as_int(col: pd.Series, name: str) -> pd.Series:
    vals = pd.to_numeric(col, errors="coerce")
    if vals.isna().any() or (vals != np.round(vals)).any():
        raise UserError(f"{name}: got {col[vals.isna() | (vals != np.round(vals))].iloc[0]!r}; allowed: integers")
    return vals.astype(np.int64)


def validate_train(df: pd.DataFrame) -> pd.DataFrame:
    missing = [c for c in ROW_KEYS if c not in df.columns]
    if missing:
        raise UserError(f"train table: missing column(s) {missing}; required at least: {list(ROW_KEYS)}")
    tr = df.copy()
    tr["run_id"] = tr["run_id"].astype(str)
    tr["policy"] = tr["policy"].astype(str)
    tr["seed"] = _as_int(tr["seed"], "train.seed")
    tr["step"] = _as_int(tr["step"], "train.step")
    return tr.sort_values(["policy", "seed", "run_id", "step"], kind="stable").reset_index(drop=True)


def _check_one_run_per_policy_seed(final: pd.DataFrame) -> None:
    runs = final.groupby(["policy", "seed"])["run_id"].nunique()
    if (runs > 1).any():
        (pol, seed), n = next((k, v) for k, v in runs.items() if v > 1)
        raise UserError(f"eval table: policy {pol!r} seed {seed} has {n} runs; allowed: one run per "
                         "(policy, seed) — give repeated runs distinct seeds or labels")


def _check_attempts(final: pd.DataFrame) -> None:
    """The attempts per (run, task) are one number in each suite (from integer codes: a
    groupby of the three string columns is the load's memory peak on a large table)."""
    suite, suites = pd.factorize(final["suite"])
    run, runs = pd.factorize(final["run_id"])
    task, tasks = pd.factorize(final["task"])
    key = (suite.astype(np.int64) * len(runs) + run) * len(tasks) + task
    cells, counts = np.unique(key, return_counts=True)
    cell_suite = cells // (len(runs) * len(tasks))
    for code in sorted(range(len(suites)), key=lambda c: suites[c]):
        values = sorted(set(int(v) for v in np.unique(counts[cell_suite == code])))
        if len(values) > 1:
            raise UserError(f"eval.attempt: inconsistent attempt counts in suite {suites[code]!r}: found {values} "
                             "attempts per (run, task); allowed: the same number for every task and run of a suite")


def attempts_per_suite(final: pd.DataFrame) -> dict[str, int]:
    """suite -> number of attempts per (run, task) (validated to be constant)."""
    counts = final.groupby(["suite", "run_id", "task"]).size()
    return {str(s): int(c.iloc[0]) for s, c in counts.groupby(level="suite")}


def axis_values(final: pd.DataFrame, axis: str) -> dict:
    """policy label -> its value of the swept knob ``axis`` (policies without one are left
    out); a label with two values raises (the knob must be constant per label)."""
    out = {}
    for pol, vals in final.groupby("policy", sort=True)[axis]:
        vals = vals.dropna().unique()
        if len(vals) > 1:
            raise UserError(f"--axis: {axis!r} takes {len(vals)} values under policy label {pol!r} "
                             f"({sorted(map(str, vals))[:4]}); allowed: a knob that is constant per label")
        if len(vals) == 1:
            out[str(pol)] = vals[0]
    return out


def harnesses(train: pd.DataFrame) -> list[str]:
    """Training-harness names from the p_<harness> columns."""
    return [c[2:] for c in train.columns if c.startswith("p_")]


def environment_key(meta: dict | None):
    """What common random numbers need two runs to share, from a run record: the
    environment section of its config and its seed (the policy, its label and its own seed
    excluded). None when the record has no config (pairing is then by seed label only)."""
    cfg = (meta or {}).get("config")
    if not isinstance(cfg, dict) or "env" not in cfg:
        return None
    return {"env": cfg.get("env"), "seed": cfg.get("seed")}


def pairing_problems(final: pd.DataFrame, runs: dict, baseline: str, candidates: list[str]
                     ) -> tuple[list[str], int]:
    """Runs paired by seed label that did not share their random numbers.

    For every candidate and every seed it shares with the baseline: the two runs'
    `environment_key` must agree. Returns (one line per disagreeing pair, naming the two
    runs and the first differing key; the number of (candidate, seed) pairs whose records
    carry no config, so only their seed labels could be compared)."""
    ids = final[["policy", "seed", "run_id"]].drop_duplicates()
    run_of = {(p, int(s)): r for p, s, r in ids.itertuples(index=False)}
    problems, unchecked = [], 0
    for cand in candidates:
        for (pol, seed), run_b in sorted(run_of.items()):
            if pol != baseline or (cand, seed) not in run_of:
                continue
            run_c = run_of[(cand, seed)]
            kc, kb = environment_key(runs.get(run_c)), environment_key(runs.get(run_b))
            if kc is None or kb is None:
                unchecked += 1
            elif kc != kb:
                problems.append(f"runs {run_c!r} ({cand}, seed {seed}) and {run_b!r} (baseline {baseline}, seed {seed}) "
                                f"do not share their environment: {_first_difference(kc, kb)}")
    return problems, unchecked


def _first_difference(a, b, where: str = "") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            if a.get(key) != b.get(key):
                return _first_difference(a.get(key), b.get(key), f"{where}.{key}" if where else str(key))
    return f"{where or 'config'} = {a!r} vs {b!r}"
