"""`hb twin`: a digital twin of your own runs (issue 30, docs/TWIN.md).

    hb twin fit DIR... --out TWIN.toml [--holdout 0.25] [--pool-size N] [--force]
    hb twin check --twin TWIN.toml --real DIR [--out CHECK_DIR] [--suite heldout_tasks] [--jobs N]

`fit` reads run folders (a run directory, an `hb sim --out` folder or a grid directory of
cells; `hbsim.contract.records`), fits the twin (`hbsim.twin`: the maths), prints the fit's quality on
held-out steps and the fitted quantities, and writes TWIN.toml (a scenario file of env kind
`twin`: `hb sim --scenario TWIN.toml`, `hb stress --scenarios TWIN.toml`) and TWIN.png (real
versus twin curves) beside it. It refuses to replace a file hb twin fit did not write (the
TOML's first line is its mark) unless --force.

`check` (`ablations.twin_check`) runs the real grid's policies (same seeds count, steps and
batch size) in the twin, in the default bernoulli env and in the closest shipped scenario,
and prints how well each world ranks them as the real runs do.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from ablations import twin_check
from ablations.twin_check import run_dirs
from hbsim import scenarios, twin
from hbsim.contract import GROUPS_FILE
from hbsim.contract.atomic import atomic_write
from hbsim.contract.folders import check_path_length, check_writable
from hbsim.contract.records import read_run
from policies.errors import UserError
from policies.validate import check_float, check_int, comma_items

#: the first line of every TWIN.toml hb writes: the mark that it is ours to replace
MARK = "# written by hb twin fit"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="twin_command", metavar="SUBCOMMAND", parser_class=type(parser))
    fit = sub.add_parser("fit", help="fit a twin (a scenario file) to run logs", description="fit a twin (a "
                         "scenario file of env kind `twin`) to the logs of one or more run folders")
    fit.add_argument("dirs", nargs="+", metavar="DIR", help="a run directory, an `hb sim --out` folder or a grid "
                                                           "directory of cells")
    fit.add_argument("--out", required=True, metavar="TWIN.toml", help="the scenario file to write (TWIN.png beside it)")
    fit.add_argument("--holdout", type=float, default=0.25,
                     help="fraction of every run's last steps the quality table scores and the first fit never "
                          "sees (default 0.25; 0 = no quality table)")
    fit.add_argument("--pool-size", type=int, default=None,
                     help=f"training tasks of the runs (default: a real run's n_train_tasks, else {twin.DEFAULT_POOL})")
    fit.add_argument("--group-size", type=int, default=None,
                     help="rollouts per group (default: the groups table's, a real run's group_size, else 8)")
    fit.add_argument("--target", default="heldout_tasks", help="the twin's target (train, heldout_tasks, "
                                                              "heldout_harness; default heldout_tasks)")
    fit.add_argument("--suite", default="heldout_tasks", help="the eval suite of the per-harness curves "
                                                             "(default heldout_tasks)")
    fit.add_argument("--force", action="store_true", help="replace a TWIN.toml / TWIN.png hb twin fit did not write")
    twin_check.add_arguments(sub.add_parser("check", help="does the twin rank policies as the real runs do?",
                                            description=twin_check.__doc__.splitlines()[0]))


def main(args: argparse.Namespace) -> int:
    if args.twin_command == "fit":
        return fit_main(args)
    if args.twin_command == "check":
        return twin_check.main(args)
    raise UserError("hb twin: expected a subcommand: fit or check")


# -- reading run folders ---------------------------------------------------------------------
def read_logs(folders: list[str]) -> list[dict]:
    """Every run of `folders`: {"train", "eval", "groups", "counterfactual", "meta", "dir"}."""
    runs = []
    for folder in folders:
        dirs = run_dirs(folder)
        if not dirs:
            raise UserError(f"DIR {folder!r} holds no complete run (no run.json below it)")
        for d in dirs:
            res = read_run(d)
            groups = d / GROUPS_FILE
            runs.append({"train": res.train, "eval": res.eval, "counterfactual": res.counterfactual,
                         "groups": pd.read_parquet(groups) if groups.is_file() else None, "meta": res.meta,
                         "dir": str(d)})
    return runs


def real_setting(runs: list[dict], key: str):
    """A REAL run's own setting (run.json env of kind `real`, e.g. n_train_tasks): what the
    user ran, not a synthetic world's truth (a synthetic run's env is never read)."""
    for run in runs:
        env = (run["meta"].get("config") or {}).get("env") or {}
        if env.get("kind") == "real" and key in env:
            return env[key]
    return None


# -- writing the twin -------------------------------------------------------------------------
def toml_text(table: dict, header: list[str]) -> str:
    """A scenario table as TOML (strings, numbers, booleans; one [env] sub-table)."""
    def value(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, np.integer)):
            return str(int(v))
        if isinstance(v, (float, np.floating)):
            return repr(float(v))
        return json.dumps(str(v), ensure_ascii=False)
    lines = [MARK] + [f"# {h}" if h else "#" for h in header]
    lines += [f"{k} = {value(v)}" for k, v in table.items() if not isinstance(v, dict)]
    for k, sub in table.items():
        if isinstance(sub, dict):
            lines += ["", f"[{k}]"] + [f"{kk} = {value(vv)}" for kk, vv in sub.items()]
    return "\n".join(lines) + "\n"


def check_replaceable_file(path: Path, force: bool, ours) -> None:
    """Refuse an existing `path` that hb did not write (`ours(path)` False) unless --force."""
    if path.is_dir():
        raise UserError(f"--out {str(path)!r} is a folder; expected the path of a .toml file")
    if path.exists() and not force and not ours(path):
        raise UserError(f"--out: {str(path)!r} exists and was not written by hb twin fit; choose another path "
                        "or pass --force")


def _ours_toml(path: Path) -> bool:
    try:
        return path.read_text(encoding="utf-8", errors="replace").startswith(MARK)
    except OSError:
        return False


def fit_main(args: argparse.Namespace) -> int:
    out = Path(args.out)
    if out.suffix.lower() != ".toml":
        raise UserError(f"--out {args.out!r} is not allowed: expected the path of a .toml file (TWIN.toml)")
    name = out.stem
    if not name or not all(c.isalnum() or c in "_-" for c in name):
        raise UserError(f"--out {args.out!r} is not allowed: the file's stem names the scenario; use letters, "
                        "digits, '_' and '-'")
    check_float("--holdout", args.holdout, 0.0, 0.9)
    if args.pool_size is not None:
        check_int("--pool-size", args.pool_size, 1, 100_000)
    if args.group_size is not None:
        check_int("--group-size", args.group_size, 2, 1024)
    if args.target not in ("train", "heldout_tasks", "heldout_harness"):
        raise UserError(f"--target {args.target!r} is not allowed: expected train, heldout_tasks or heldout_harness")
    figure = out.with_suffix(".png")
    check_path_length(out)
    check_writable(out.parent)
    check_replaceable_file(out, args.force, _ours_toml)
    check_replaceable_file(figure, args.force or _ours_toml(out), lambda p: False)
    start = time.perf_counter()
    runs = read_logs(args.dirs)
    pool = args.pool_size or real_setting(runs, "n_train_tasks")
    group_size = args.group_size or real_setting(runs, "group_size")
    try:
        obs = twin.observations(runs, group_size=group_size, suite=args.suite)
    except ValueError as exc:
        raise UserError(f"hb twin fit: {exc}") from None
    result = twin.fit(obs, holdout=args.holdout)
    seeds = len({int(r["meta"].get("seed", 0)) for r in runs})
    attempts = _attempts(runs)
    table = twin.scenario(result, name=name, target=args.target, pool_size=pool, seeds=seeds, k_attempts=attempts,
                          sources=f" ({', '.join(str(Path(d)) for d in args.dirs)})")
    quantities = twin.world_quantities(table["env"])
    text = report_text(result, quantities, table, pool)
    out.parent.mkdir(parents=True, exist_ok=True)          # after every check and the fit
    atomic_write(out, toml_text(table, ["fitted to " + ", ".join(args.dirs)] + text.splitlines()))
    scenarios.load(out)                          # checked like a shipped scenario file
    fig = curves_figure(result)
    atomic_write(figure, lambda tmp: fig.savefig(tmp, dpi=110, metadata={"Software": "hb twin fit"}))
    print(text)
    print(f"hb twin fit: {len(runs)} runs, {int(obs.steps.sum())} logged steps, fitted in {result.seconds:.1f}s "
          f"({result.evaluations} model replays); wrote {out} and {figure} in {time.perf_counter() - start:.1f}s",
          file=sys.stderr)
    return 0


def _attempts(runs: list[dict]) -> int | None:
    ev = runs[0]["eval"]
    if not len(ev) or "attempt" not in ev:
        return None
    return int(ev["attempt"].max()) + 1


def report_text(result: twin.Fit, q: dict, table: dict, pool) -> str:
    """The printed quality table (held-out steps) and the twin's quantities."""
    obs, prm = result.obs, result.params
    lines = []
    if len(result.quality):
        lines.append("fit quality on held-out steps (the last part of every run; rmse, R^2 = 1 - mse / variance, corr):")
        for r in result.quality.itertuples():
            lines.append(f"  {r.quantity:<34} n={r.n:<5} rmse {r.rmse:.4g}  (std {r.std:.4g})  R^2 {r.r2:+.2f}  "
                         f"corr {r.corr:+.2f}")
    names = obs.harnesses
    width = max(len(n) for n in names + ["harness"])
    lines.append("fitted quantities (the twin's exact model at the start):")
    lines.append(f"  {'harness'.ljust(width)}  role      initial  ceiling  read    own gain  mean effect on others")
    T = q["transfer"]
    H = len(names)
    roles = comma_items(table["env"]["roles"])
    for h, n in enumerate(names):
        others = (T[h, :H].sum() - T[h, h]) / max(H - 1, 1)
        lines.append(f"  {n.ljust(width)}  {roles[h]:<8}  {q['initial'][h]:.3f}    {q['ceiling'][h]:.2f}     "
                     f"{prm.read[h]:+.2f}   {T[h, h]:+.4f}   {others:+.4f}")
    lines.append("  transfer matrix (row: pure step on, column: change of success of; last column the held-out "
                 "harness):")
    for h, n in enumerate(names):
        lines.append(f"    {n.ljust(width)} " + " ".join(f"{v:+.4f}" for v in T[h]))
    env = table["env"]
    ratio = env["n_tasks"] / max(table["steps"], 1)
    lines.append(f"  forgetting {env['forget']}, interference {env['interference']} (mixed/pure gain "
                 f"{q['mixed_ratio']:.2f}), skill_lr {env['skill_lr']}, max_step {env['max_step']}, "
                 f"task-difficulty spread (noise level) {env['difficulty_std']}, noise harnesses "
                 f"{[n for n, r in zip(names, roles) if r == 'noise'] or 'none'}")
    cost = env.get("group_tokens", "none logged")
    lines.append(f"  cost per group {cost}; pool {env['n_tasks']} tasks{'' if pool else ' (assumed)'} / "
                 f"{table['steps']} steps = {ratio:.2f} tasks per step")
    return "\n".join(lines)


def curves_figure(result: twin.Fit):
    """Real (dots: mean over runs of the eval success per harness) versus twin (lines: the
    twin's replay of the same schedules) per harness; returns the figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    obs, prm = result.obs, result.params
    out = twin.replay(prm, obs.alloc, obs.group_size)
    names = obs.harnesses + ([obs.heldout] if obs.heldout else [])
    fig, ax = plt.subplots(figsize=(8, 4.5))
    e = obs.evals
    for h, n in enumerate(names):
        color = f"C{h % 10}"
        m = e["h"] == h
        if m.any():
            frame = pd.DataFrame({"t": e["t"][m], "v": e["value"][m]}).groupby("t")["v"].mean()
            ax.plot(frame.index, frame.values, "o", color=color, ms=4)
        else:
            g = obs.groups
            m = (g["h"] == h) & (g["kind"] < 2)
            frame = pd.DataFrame({"t": g["t"][m], "v": g["value"][m]}).groupby("t")["v"].mean()
            ax.plot(frame.index, frame.values, ".", color=color, ms=2, alpha=0.5)
        ax.plot(np.arange(out["p"].shape[1]), out["p"][:, :, h].mean(axis=0), "-", color=color, label=n)
    ax.set_xlabel("step")
    ax.set_ylabel("success")
    ax.set_title("real (dots) vs twin (lines), mean over runs")
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    return fig


__all__ = ["MARK", "add_arguments", "main", "read_logs", "run_dirs", "toml_text"]
