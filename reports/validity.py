"""Signal validity: does L, T or the fused score predict the true gain of training on a
harness? Pure statistics over `counterfactual.parquet` files (SPEC §7, written by runs with
`--counterfactual`), plus their tables, CSVs and an HTML page.

Per (env, signal, target), with harnesses as the items compared at one step:
* rho: Spearman correlation across the H harnesses of the signal and the target's true
  expected gain at one probed step, averaged over the probed steps (> `min_step`) of a
  seed; the seed means are the replication unit: mean over seeds and a percentile
  bootstrap interval over seeds;
* top1: share of steps where the harness with the largest signal is the truly best one
  (chance 1/H); same averaging and interval;
* calibration: the target's mean gain in quantile bins of the signal (pooled over seeds).
Oracles and regret per target: the truly best harness per target and step, the regret of
the run's own (pure) choice on each target, and how often the training-objective oracle
is also the best harness for the other targets.

Reads files only (their names and the run record reader are `hbsim.contract` and
`hbsim.contract.records`); writes with `hbsim.contract.atomic.atomic_write`.
"""
from __future__ import annotations

import html
import json
from pathlib import Path

import numpy as np
import pandas as pd

from hbsim.contract import COUNTERFACTUAL_FILE, TRAIN_FILE
from hbsim.contract.atomic import atomic_write, find_files
from hbsim.contract.records import read_meta
from policies.errors import UserError
from reports.load import _parquet
from reports.readings import intervals

#: signal column of counterfactual.parquet -> name in the tables
SIGNALS = {"learnability": "L", "t_grad": "T(gradient)", "t_update": "T(update)", "score": "fused S",
           "true_t": "true T"}
#: target gain column -> target name
TARGETS = {"gain_train": "training objective", "gain_heldout_tasks": "held-out tasks",
           "gain_heldout_harness": "held-out harness"}
#: columns of counterfactual.parquet the analysis needs
REQUIRED = ("policy", "seed", "step", "arm", *TARGETS)


# -- loading ---------------------------------------------------------------------------
def load(directory, runs: list | None = None) -> pd.DataFrame:
    """Every counterfactual.parquet under `directory` (a run dir, an `hb sim --out` dir, a
    grid dir or a study dir; never in hidden or temporary folders; `runs`: only those of
    these run directories; the pure probes' rows, arm >= 0), with `env` (the kind, plus the knobs that tell same-kind envs apart) and
    `train_arm` (the arm the run took at that step, -1 for a mixed batch) joined in."""
    root = Path(directory)
    if not root.is_dir():
        raise UserError(f"hb validity: DIR={str(root)!r} is not a directory: expected a run, sim or grid directory")
    files = _files(root) if runs is None else [Path(r) / COUNTERFACTUAL_FILE for r in runs]
    if not files:
        raise UserError(f"hb validity: no {COUNTERFACTUAL_FILE} under {str(root)!r}: run `hb sim --counterfactual` "
                        f"(or a grid with counterfactual = 1) first")
    frames, envs = [], {}
    for f in files:
        cf = _parquet(f)
        missing = [c for c in REQUIRED if c not in cf]
        if missing:
            raise UserError(f"{COUNTERFACTUAL_FILE}: {str(f)!r} lacks column(s) {missing}; required: "
                            f"{list(REQUIRED)} (SPEC 7)")
        cf = cf[cf["arm"] >= 0].reset_index(drop=True)   # the pure probes (the mixed probe's row has arm -1)
        meta = read_meta(f.parent) or {}
        env = (meta.get("config") or {}).get("env") or {"kind": "?"}
        envs[str(f)] = env
        train_path = f.parent / TRAIN_FILE
        if train_path.is_file() and len(cf):
            train = _parquet(train_path)
            keep = [c for c in ("step", "arm", "entropy") if c in train]
            train = train[keep].rename(columns={"arm": "train_arm", "entropy": "law_entropy"})
            cf = cf.merge(train, on="step", how="left")
        else:
            cf["train_arm"] = -1
        if "law_entropy" not in cf:
            cf["law_entropy"] = np.nan
        cf["_file"] = str(f)
        frames.append(cf)
    out = pd.concat(frames, ignore_index=True)
    out["env"] = out["_file"].map(env_labels(envs))
    return out.drop(columns="_file")


def env_labels(envs: dict[str, dict]) -> dict[str, str]:
    """key -> env label: the kind, with `[knob=value,...]` (at most 3) where several env
    configs share a kind."""
    by_kind: dict[str, list[str]] = {}
    for key, env in envs.items():
        by_kind.setdefault(env.get("kind", "?"), []).append(key)
    labels = {}
    for kind, keys in by_kind.items():
        configs = [envs[k] for k in keys]
        differ = sorted(k for k in set().union(*configs) if len({json.dumps(c.get(k)) for c in configs}) > 1)
        for key in keys:
            extra = ",".join(f"{k}={envs[key].get(k)}" for k in differ[:3])
            labels[key] = f"{kind}[{extra}]" if extra else kind
    return labels


# -- statistics (pure) -------------------------------------------------------------------
def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman rho of two (H,) vectors (average ranks for ties) over the finite pairs; NaN
    below 3 pairs or when either side is constant."""
    ok = np.isfinite(x) & np.isfinite(y)
    if ok.sum() < 3:
        return float("nan")
    rx, ry = pd.Series(x[ok]).rank().to_numpy(), pd.Series(y[ok]).rank().to_numpy()
    if rx.std() == 0 or ry.std() == 0:
        return float("nan")
    return float(np.corrcoef(rx, ry)[0, 1])


def top1(x: np.ndarray, y: np.ndarray) -> float:
    """1.0 when the harness with the largest finite signal x has the largest target y, else
    0.0; NaN when no signal is finite."""
    ok = np.isfinite(x) & np.isfinite(y)
    if not ok.any():
        return float("nan")
    idx = np.flatnonzero(ok)
    return float(y[idx[np.argmax(x[idx])]] >= y[idx].max())


def bootstrap_mean(values: np.ndarray, rng: np.random.Generator, resamples: int = 2000,
                   level: float = 0.95) -> tuple[float, float, float]:
    """Mean of `values` (seeds,) and the percentile bootstrap interval over seeds."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return float("nan"), float("nan"), float("nan")
    if v.size == 1:
        return float(v[0]), float("nan"), float("nan")
    means = v[rng.integers(0, v.size, (resamples, v.size))].mean(axis=1)
    lo, hi = intervals.percentile_interval(means, level)
    return float(v.mean()), float(lo), float(hi)


def per_step(cf: pd.DataFrame, min_step: int = 0) -> pd.DataFrame:
    """One row per (env, policy, seed, step, signal, target): rho and top1 across harnesses."""
    rows = []
    cf = cf[cf["step"] > min_step]
    signals = [s for s in SIGNALS if s in cf]
    for (env, policy, seed, step), g in cf.groupby(["env", "policy", "seed", "step"], sort=True):
        g = g.sort_values("arm")
        for s in signals:
            x = g[s].to_numpy(dtype=np.float64)
            for t in TARGETS:
                y = g[t].to_numpy(dtype=np.float64)
                rows.append((env, policy, seed, step, SIGNALS[s], TARGETS[t], spearman(x, y), top1(x, y), len(g)))
    return pd.DataFrame(rows, columns=["env", "policy", "seed", "step", "signal", "target", "rho", "top1", "H"])


def validity_table(steps: pd.DataFrame, resamples: int = 2000, seed: int = 0) -> pd.DataFrame:
    """(env, policy, signal, target) -> rho and top1: mean over seeds of the per-seed step
    means, with bootstrap intervals over seeds; chance = 1/H; n_seeds, n_steps."""
    rng = np.random.default_rng(seed)
    rows = []
    keys = ["env", "policy", "signal", "target"]
    for key, g in steps.groupby(keys, sort=False):
        seeds = g.groupby("seed")[["rho", "top1"]].mean()
        rho = bootstrap_mean(seeds["rho"].to_numpy(), rng, resamples)
        hit = bootstrap_mean(seeds["top1"].to_numpy(), rng, resamples)
        rows.append((*key, *rho, *hit, 1.0 / g["H"].max(), len(seeds), int(g["rho"].notna().sum())))
    return pd.DataFrame(rows, columns=keys + ["rho", "rho_lo", "rho_hi", "top1", "top1_lo", "top1_hi", "chance",
                                              "n_seeds", "n_steps"])


def calibration(cf: pd.DataFrame, bins: int = 5, min_step: int = 0) -> pd.DataFrame:
    """(env, signal, target, bin) -> signal range, mean signal and mean true gain of the
    rows in each quantile bin of the signal (pooled over policies and seeds)."""
    rows = []
    cf = cf[cf["step"] > min_step]
    for env, g in cf.groupby("env", sort=True):
        for s, name in SIGNALS.items():
            if s not in g:
                continue
            x = g[s].to_numpy(dtype=np.float64)
            ok = np.isfinite(x)
            if ok.sum() < bins:
                continue
            edges = np.unique(np.quantile(x[ok], np.linspace(0, 1, bins + 1)))
            which = np.clip(np.searchsorted(edges, x[ok], side="right") - 1, 0, len(edges) - 2)
            for t, tname in TARGETS.items():
                y = g[t].to_numpy(dtype=np.float64)[ok]
                for b in range(len(edges) - 1):
                    m = which == b
                    if m.any():
                        rows.append((env, name, tname, b, edges[b], edges[b + 1], float(x[ok][m].mean()),
                                     float(y[m].mean()), int(m.sum())))
    return pd.DataFrame(rows, columns=["env", "signal", "target", "bin", "low", "high", "signal_mean", "gain_mean",
                                       "n"])


def regret_table(cf: pd.DataFrame, min_step: int = 0) -> pd.DataFrame:
    """(env, policy, target) -> mean per probed step of the regret of the run's pure choice
    on that target (max_h gain - gain of the chosen h; mixed steps left out), and the share
    of steps where the training-objective oracle is also this target's best harness;
    law_entropy: mean normalised entropy of the run's sampling law at those steps (1 = uniform)."""
    rows = []
    cf = cf[cf["step"] > min_step]
    for (env, policy), g in cf.groupby(["env", "policy"], sort=True):
        per_step = g.groupby(["seed", "step"])
        best = {t: per_step[t].transform("max") for t in TARGETS}
        oracle_train = g.loc[per_step["gain_train"].idxmax(), ["seed", "step", "arm"]]
        for t, tname in TARGETS.items():
            chosen = g[g["arm"] == g["train_arm"]]
            regret = (best[t][chosen.index] - chosen[t]).groupby(chosen["seed"]).mean()
            oracle_t = g.loc[per_step[t].idxmax(), ["seed", "step", "arm"]]
            agree = (oracle_t["arm"].to_numpy() == oracle_train["arm"].to_numpy())
            entropy = g.get("law_entropy", pd.Series(np.nan, index=g.index)).mean()
            rows.append((env, policy, tname, float(regret.mean()) if len(regret) else float("nan"),
                         float(agree.mean()), len(chosen), float(entropy)))
    return pd.DataFrame(rows, columns=["env", "policy", "target", "regret_per_step", "train_oracle_agrees",
                                       "pure_steps", "law_entropy"])


def _files(root: Path) -> list[Path]:
    """The counterfactual files of a run (depth 0), sim or grid (2) or study (3) directory."""
    return find_files(root, COUNTERFACTUAL_FILE, depth=3)


def analyse(directory, min_step: int = 30, resamples: int = 2000, seed: int = 0, bins: int = 5,
            runs: list | None = None) -> dict:
    """Every table of the validity analysis: {"validity", "calibration", "regret"} (`runs`: `load`)."""
    cf = load(directory, runs)
    steps = per_step(cf, min_step)
    return {"validity": validity_table(steps, resamples, seed), "calibration": calibration(cf, bins, min_step),
            "regret": regret_table(cf, min_step)}


# -- presentation ------------------------------------------------------------------------
def _cell(mean: float, lo: float, hi: float, hit: float) -> str:
    if not np.isfinite(mean):
        return "-"
    ci = f" [{lo:+.2f}, {hi:+.2f}]" if np.isfinite(lo) else ""
    return f"{mean:+.2f}{ci} / {hit:.2f}"


def _fixed(header: list[str], lines: list[list[str]]) -> str:
    widths = [max(len(header[i]), *(len(line[i]) for line in lines)) for i in range(len(header))]
    fmt = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return "\n".join([fmt(header), fmt(["-" * w for w in widths])] + [fmt(line) for line in lines])


def validity_lines(table: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the wide validity table: one row per (env, policy, signal), one
    cell per target: `rho [lo, hi] / top1`."""
    header = ["env", "policy", "signal"] + [f"{t}: rho [95% CI] / top-1" for t in TARGETS.values()] + ["chance",
                                                                                                     "seeds"]
    lines = []
    for (env, policy, signal), g in table.groupby(["env", "policy", "signal"], sort=False):
        if not g["n_steps"].any():            # a signal this env never produces (no update sketch)
            continue
        by_target = g.set_index("target")
        cells = []
        for t in TARGETS.values():
            r = by_target.loc[t] if t in by_target.index else None
            cells.append("-" if r is None else _cell(r["rho"], r["rho_lo"], r["rho_hi"], r["top1"]))
        lines.append([env, policy, signal, *cells, f"{g['chance'].iloc[0]:.2f}", str(int(g["n_seeds"].max()))])
    return header, lines


def regret_lines(table: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    header = ["env", "policy", "target", "regret/step (this target)", "train oracle = best here", "pure steps",
              "law entropy"]
    lines = [[r.env, r.policy, r.target, f"{r.regret_per_step:.2e}", f"{100 * r.train_oracle_agrees:.0f}%",
              str(r.pure_steps), f"{r.law_entropy:.2f}"] for r in table.itertuples()]
    return header, lines


def text_tables(tables: dict) -> str:
    """The stdout report of `hb validity`."""
    out = ["Signal validity: Spearman rho across harnesses between the signal and the TRUE expected one-step "
           "gain on each target (mean over probed steps, 95% bootstrap interval over seeds) / top-1 agreement "
           "(share of steps where the signal's best harness is the truly best one; chance = 1/H)",
           _fixed(*validity_lines(tables["validity"])) if len(tables["validity"]) else "(no probed steps)", "",
           "Oracles and regret per target: regret of the run's own pure choice on each target, and how often the "
           "training-objective oracle (train column oracle_arm) is also the best harness for that target; law "
           "entropy = mean normalised entropy of the sampling law (train column entropy; 1 = uniform)",
           _fixed(*regret_lines(tables["regret"])) if len(tables["regret"]) else "(no pure steps)"]
    return "\n".join(out)


def _svg_calibration(g: pd.DataFrame, width: int = 220, height: int = 140) -> str:
    """A small line plot of mean gain per signal bin (one line per target), inline SVG."""
    colours = dict(zip(TARGETS.values(), ("#1f77b4", "#ff7f0e", "#2ca02c")))
    x, y = g["signal_mean"].to_numpy(), g["gain_mean"].to_numpy()
    if not len(x):
        return ""
    x0, x1, y0, y1 = x.min(), x.max(), min(y.min(), 0.0), max(y.max(), 0.0)
    sx = lambda v: 30 + (v - x0) / ((x1 - x0) or 1) * (width - 40)  # noqa: E731
    sy = lambda v: height - 20 - (v - y0) / ((y1 - y0) or 1) * (height - 30)  # noqa: E731
    parts = [f'<svg width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg">',
             f'<line x1="30" y1="{sy(0):.1f}" x2="{width - 10}" y2="{sy(0):.1f}" stroke="#bbb"/>']
    for target, t in g.groupby("target", sort=False):
        pts = " ".join(f"{sx(a):.1f},{sy(b):.1f}" for a, b in zip(t["signal_mean"], t["gain_mean"]))
        parts.append(f'<polyline fill="none" stroke="{colours.get(target, "#000")}" stroke-width="2" points="{pts}">'
                     f'<title>{html.escape(target)}</title></polyline>')
    parts.append(f'<text x="30" y="{height - 4}" font-size="10">signal {x0:.2g} .. {x1:.2g}</text></svg>')
    return "".join(parts)


def render_page(tables: dict) -> str:
    """validity.html: the two tables and one calibration plot per (env, signal)."""
    def table_html(header, lines):
        head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in line) + "</tr>" for line in lines)
        return f"<table><tr>{head}</tr>{body}</table>"

    parts = ["<!doctype html><meta charset='utf-8'><title>Signal validity</title>",
             "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:2px 6px;font-size:13px}figure{display:inline-block;margin:6px}"
             "</style>",
             "<h1>Signal validity</h1><p>Does L, T or the fused score predict the true gain of training on a "
             "harness? From what-if pure steps on every harness (<code>--counterfactual</code>). Cells: Spearman "
             "rho across harnesses (mean over probed steps, 95% bootstrap interval over seeds) / top-1 agreement "
             "with the truly best harness (chance 1/H).</p>"]
    if len(tables["validity"]):
        parts.append(table_html(*validity_lines(tables["validity"])))
    parts.append("<h2>Oracles and regret per target</h2>")
    if len(tables["regret"]):
        parts.append(table_html(*regret_lines(tables["regret"])))
    parts.append("<h2>Calibration</h2><p>Mean true gain per quantile bin of the signal; blue: training objective, "
                 "orange: held-out tasks, green: held-out harness.</p>")
    for (env, signal), g in tables["calibration"].groupby(["env", "signal"], sort=False):
        parts.append(f"<figure>{_svg_calibration(g)}<figcaption>{html.escape(env)}: "
                     f"{html.escape(signal)}</figcaption></figure>")
    return "\n".join(parts) + "\n"


def write(tables: dict, out: Path) -> dict:
    """validity.csv, calibration.csv, regret.csv and validity.html into `out`; returns the paths."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = {name: out / f"{name}.csv" for name in ("validity", "calibration", "regret")}
    for name, path in paths.items():
        atomic_write(path, tables[name].to_csv(index=False))
    paths["html"] = atomic_write(out / "validity.html", render_page(tables))
    return paths


def write_page_if_any(directory, out: Path) -> Path | None:
    """For `hb report`: validity.html (+ CSVs) into the report folder when `directory` holds
    counterfactual files; None otherwise."""
    if directory is None or not Path(directory).is_dir() or not _files(Path(directory)):
        return None
    return write(analyse(directory), Path(out))["html"]
