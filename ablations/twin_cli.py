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
import math
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from ablations import twin_check
from ablations.twin_check import run_dirs
from hbsim import scenarios, twin
from hbsim.contract import COUNTERFACTUAL_FILE, EVAL_FILE, GROUPS_FILE, SUITES, TRAIN_FILE
from hbsim.contract.atomic import atomic_write
from hbsim.contract.folders import check_output_file, claim_output_file
from hbsim.contract.records import check_columns, check_range, check_steps, read_run, table_error
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
#: the train columns a fit reads besides the allocation (`alloc_<harness>`)
FIT_TRAIN_COLUMNS = ("arm", "groups_generated", "groups_retained", "reward")
#: the bound on a fit's input, checked before the fit: runs x steps (the longest run's, every run is
#: padded to it) x harnesses. The fit replays the logged schedules as arrays of that size many times
#: over (about 4 KB per cell at the peak: 40 runs x 3,000 steps x 5 harnesses took 2.3 GB)
MAX_FIT_CELLS = 2_000_000
#: the eval suite of the held-out harness: the one whose harnesses a train table lacks
HELD_OUT_HARNESS = SUITES[1]


def read_logs(folders: list[str], suite: str = "heldout_tasks") -> list[dict]:
    """Every run of `folders`: {"train", "eval", "groups", "counterfactual", "meta", "dir"},
    each table schema checked (`hbsim.contract.records.read_run`) and checked against what a fit reads
    (`check_run`); `suite` must be among the runs' eval suites. UserError, one line naming
    the file, otherwise."""
    dirs = []
    for folder in folders:
        found = run_dirs(folder, "DIR")
        if not found:
            raise UserError(f"DIR {folder!r} holds no complete run (no run.json below it)")
        dirs += found
    runs = []
    for d in dirs:
        res = read_run(d)
        run = {"train": res.train, "eval": res.eval, "counterfactual": res.counterfactual, "groups": res.groups,
               "meta": res.meta, "dir": str(d)}
        check_run(run, runs[0] if runs else None)
        runs.append(run)
    suites = sorted({str(s) for run in runs for s in run["eval"]["suite"].unique()})
    if suites and suite not in suites:
        raise UserError(f"--suite {suite!r} is not in the runs' evaluations ({runs[0]['dir']}/{EVAL_FILE} ...); "
                        f"allowed: {', '.join(suites)}")
    return runs


def harnesses_of(train: pd.DataFrame) -> list[str]:
    """The training harnesses of a train table: its `alloc_<harness>` columns, in order."""
    return [c[len("alloc_"):] for c in train.columns if c.startswith("alloc_")]


def check_run(run: dict, first: dict | None) -> None:
    """What a fit reads from one run, beyond the contract's schema (`hbsim.contract.records.read_table`):
    the allocation columns (finite, >= 0) and FIT_TRAIN_COLUMNS, an arm below the harness count,
    the counts of generated and retained groups (finite, >= 0, retained <= generated), the same
    harnesses as the first run, a groups table and every eval suite but the held-out harness's
    naming only those harnesses, and no step of the groups, eval or counterfactual table beyond
    the train table's last step."""
    d, train = Path(run["dir"]), run["train"]
    path = d / TRAIN_FILE
    names = harnesses_of(train)
    if not names:
        raise table_error(path, "alloc_<harness>", "is missing", "one alloc_<harness> column per training harness")
    check_columns(path, train, FIT_TRAIN_COLUMNS)
    if not len(train):
        raise UserError(f"{str(path)!r} holds no logged step; allowed: a run with at least one step")
    alloc = train[[f"alloc_{h}" for h in names]].apply(pd.to_numeric, errors="coerce").to_numpy(dtype=np.float64)
    if not (np.isfinite(alloc) & (alloc >= 0)).all():
        col = f"alloc_{names[int(np.argmax(~(np.isfinite(alloc) & (alloc >= 0))) % len(names))]}"
        raise table_error(path, col, "holds a value that is not a finite count", "finite numbers >= 0")
    check_steps(path, train["arm"].to_numpy(), -1, len(names) - 1, "arm")
    for column in ("groups_generated", "groups_retained"):
        check_range(path, train[column].to_numpy(), column, 0, math.inf)
    retained, generated = (train[c].to_numpy(dtype=np.float64) for c in ("groups_retained", "groups_generated"))
    if (retained > generated).any():
        i = int(np.argmax(retained > generated))
        raise table_error(path, "groups_retained", f"holds {retained[i]:g} (row {i}), more than that step's "
                          f"groups_generated {generated[i]:g}", "at most groups_generated")
    if first is not None and harnesses_of(first["train"]) != names:
        raise UserError(f"{str(path)!r}: its harnesses ({', '.join(names)}) differ from those of "
                        f"{str(Path(first['dir']) / TRAIN_FILE)!r} ({', '.join(harnesses_of(first['train']))}); "
                        "allowed: runs on the same harnesses, in the same order")
    last = int(train["step"].max())
    for name, frame in ((GROUPS_FILE, run["groups"]), (EVAL_FILE, run["eval"]), (COUNTERFACTUAL_FILE,
                                                                                run["counterfactual"])):
        if frame is None or not len(frame):
            continue
        check_steps(d / name, frame["step"].to_numpy(), 0 if name == EVAL_FILE else 1, last)
    held_out = run["eval"]["suite"] == HELD_OUT_HARNESS          # the one suite on harnesses never trained
    for name, frame in ((GROUPS_FILE, run["groups"]), (EVAL_FILE, run["eval"][~held_out])):
        if frame is None or not len(frame):
            continue
        extra = sorted(set(frame["harness"].astype(str)) - set(names))
        if extra:
            raise table_error(d / name, "harness", f"names {extra[0]!r}, which {TRAIN_FILE} lacks",
                              f"the training harnesses of {TRAIN_FILE}: {', '.join(names)}"
                              + (f" (another only in suite {HELD_OUT_HARNESS!r})" if name == EVAL_FILE else ""))


def check_fit_size(runs: list[dict]) -> tuple[int, int, int]:
    """(runs, steps, harnesses) of the fit's arrays, refused beyond MAX_FIT_CELLS before the fit."""
    R, S, H = len(runs), max(int(r["train"]["step"].max()) for r in runs), len(harnesses_of(runs[0]["train"]))
    if R * S * H > MAX_FIT_CELLS:
        raise UserError(f"hb twin fit: {R} runs x {S} steps x {H} harnesses = {R * S * H:,} is too large a fit; "
                        f"allowed: at most {MAX_FIT_CELLS:,} (fewer runs, or the runs' first steps)")
    return R, S, H


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


def _ours_toml(path: Path) -> bool:
    """The twin TOML's mark: its first line (MARK)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(len(MARK)) == MARK.encode()
    except OSError:
        return False


def _ours_png(path: Path) -> bool:
    """The twin figure's mark: the PNG's Software tag `hb twin fit` (`curves_figure`'s savefig)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except OSError:
        return False
    return head.startswith(b"\x89PNG") and b"Software\x00" + FIGURE_MARK.encode() in head


#: the Software tag of every TWIN.png hb writes: the mark that it is ours to replace
FIGURE_MARK = "hb twin fit"


class Heartbeat:
    """Progress of a long fit on stderr: a line every `every` seconds (the phase, the fit's
    size and the time so far), from a daemon thread, until the `with` block ends."""

    def __init__(self, what: str, every: float = 10.0):
        import threading
        self.what, self.every, self.start = what, every, time.perf_counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="hb-twin-progress")

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            print(f"hb twin fit: {self.what}: {time.perf_counter() - self.start:.0f}s so far", file=sys.stderr,
                  flush=True)

    def __enter__(self):
        print(f"hb twin fit: {self.what} ...", file=sys.stderr, flush=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


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
    check_output_file(out, _ours_toml, force=args.force, tool="hb twin fit")
    check_output_file(figure, _ours_png, force=args.force, tool="hb twin fit")
    start = time.perf_counter()
    runs = read_logs(args.dirs, args.suite)
    R, S, H = check_fit_size(runs)
    pool = args.pool_size or real_setting(runs, "n_train_tasks")
    group_size = args.group_size or real_setting(runs, "group_size")
    try:
        obs = twin.observations(runs, group_size=group_size, suite=args.suite)
    except ValueError as exc:
        raise UserError(f"hb twin fit: {exc}") from None
    with Heartbeat(f"fitting {R} runs x {S} steps x {H} harnesses"):
        result = twin.fit(obs, holdout=args.holdout)
    seeds = len({int(r["meta"].get("seed", 0)) for r in runs})
    attempts = _attempts(runs)
    table = twin.scenario(result, name=name, target=args.target, pool_size=pool, seeds=seeds, k_attempts=attempts,
                          sources=f" ({', '.join(str(Path(d)) for d in args.dirs)})")
    quantities = twin.world_quantities(table["env"])
    text = report_text(result, quantities, table, pool)
    claim_output_file(out)                       # after every check and the fit: the folder, a kill's temporaries
    claim_output_file(figure)
    atomic_write(out, toml_text(table, ["fitted to " + ", ".join(args.dirs)] + text.splitlines()))
    scenarios.load(out)                          # checked like a shipped scenario file
    fig = curves_figure(result)
    atomic_write(figure, lambda tmp: fig.savefig(tmp, dpi=110, metadata={"Software": FIGURE_MARK}))
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
    lines.append(f"  {'harness'.ljust(width)}  role      initial  ceiling  read (se)       own gain  mean effect on others")
    T = q["transfer"]
    H = len(names)
    roles = comma_items(table["env"]["roles"])
    se = result.standard_errors("read")
    for h, n in enumerate(names):
        others = (T[h, :H].sum() - T[h, h]) / max(H - 1, 1)
        err = f"({se[h]:.2f})" if np.isfinite(se[h]) else "(-)" if np.isnan(se[h]) else "(not seen)"
        lines.append(f"  {n.ljust(width)}  {roles[h]:<8}  {q['initial'][h]:.3f}    {q['ceiling'][h]:.2f}     "
                     f"{prm.read[h]:+.2f} {err:<10} {T[h, h]:+.4f}   {others:+.4f}")
    unsure = result.unsure()
    if unsure:
        lines.append(f"  WARNING: the sign of the core reading is not identified by these logs for "
                     f"{', '.join(names[h] for h in unsure)} (|read| < {twin.SIGN_Z:g} standard errors): whether "
                     "training it helps or hurts the other harnesses is a guess; more probes, larger probes or a "
                     "short run on that harness alone would tell (docs/TWIN.md, Identifiability)")
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
