"""`hb calibrate`: how often does each test of `hb report` cry wolf? (A/A calibration)

    hb calibrate [--env bernoulli] [--policy uniform] [--blocks 20] [--seeds 8] [--steps 100]
                 [--alpha 0.05] [--resamples 2000] [--seed 0] [--csv FILE] [--jobs N] [--backend local|ray]
                 [--asymmetric Q]

Each of K blocks runs the same policy twice on S seeds: arm A with policy seed s, arm B
with policy seed s + 1,000,000, both on the environment built with seed s (common random
numbers: the same tasks and noise streams, only the scheduler's draws differ). There is
no true difference, so every p < alpha is a false positive. For every suite, metric and
test of `reports.inference.TESTS` (plus the seed-clustered GEE) the command prints the
empirical false-positive rate over the K blocks with an exact binomial 95% interval.
A valid test's rate is about alpha; one whose interval lies above alpha is too optimistic.
The 2 K S runs go through `ablations.runner.run_many` (results in memory, each block tested
once complete). Progress goes to stderr. This module runs simulations, so it lives in
`ablations` (`reports` only provides the pure tests).

`--asymmetric Q` shows what the seed-level tests test: "the policy has no effect" (the two
runs of a seed exchangeable), not "equal means". Arm B's runs then get a skewed run
effect with mean zero (`skew_arm`): with probability Q a run "breaks through" (a share of
its failed attempts succeed), otherwise it trails slightly (a share of its successes
fail), the shares chosen so that every run's expected success rate is unchanged. The
means are equal, the distributions are not, and the tests reject more often than alpha,
mostly saying that B trails (printed).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from ablations.plan import check_cells
from ablations import runner
from hbsim.envs import ENVS
from hbsim.experiment import resolve_config
from hbsim.contract.atomic import atomic_write, remove_temp
from hbsim.contract.folders import check_path_length, check_writable
from hbsim.run_knobs import run_values
from policies import POLICIES
from policies.errors import UserError
from policies.validate import MAX_RESAMPLES, MAX_SEED, MAX_SEEDS, check_choice, check_float, check_int

POLICY_SEED_OFFSET = 1_000_000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--env", default="bernoulli", help="synthetic environment kind (default bernoulli)")
    parser.add_argument("--policy", default="uniform", help="the policy run in both arms (default uniform)")
    parser.add_argument("--blocks", type=int, default=20, help="number of A/A comparisons K (default 20)")
    parser.add_argument("--seeds", type=int, default=8, help="seeds per comparison S (default 8)")
    parser.add_argument("--steps", type=int, default=100, help="optimizer steps per run (default 100)")
    parser.add_argument("--alpha", type=float, default=0.05, help="test level (default 0.05)")
    parser.add_argument("--resamples", type=int, default=2000, help="permutation resamples (default 2000)")
    parser.add_argument("--seed", type=int, default=0, help="first environment seed and permutation generator seed")
    parser.add_argument("--csv", help="also write the per-block p-values to this CSV file")
    parser.add_argument("--asymmetric", type=float, default=None, metavar="Q",
                        help="arm B's runs break through with probability Q (0 < Q <= 0.5), the mean success "
                             "rate unchanged: the tests' rejection rate under skewed run effects with equal means")
    runner.add_run_options(parser)


def _check(args) -> None:
    """Every argument is checked before the first simulation runs."""
    check_int("--blocks", args.blocks, 1, 10_000)
    check_int("--seeds", args.seeds, 2, MAX_SEEDS)
    check_cells(2 * args.blocks * args.seeds, "hb calibrate", "runs (blocks x seeds x 2)", "--blocks or --seeds")
    run_values(flags={"steps": args.steps})       # the run knob's one parse, named --steps
    check_int("--resamples", args.resamples, 1, MAX_RESAMPLES)
    check_float("--alpha", args.alpha, 0.0, 1.0, low_open=True, high_open=True)
    if args.asymmetric is not None:
        check_float("--asymmetric", args.asymmetric, 0.0, 0.5, low_open=True)
    # environment seeds seed .. seed + blocks * seeds - 1, policy seeds up to that + POLICY_SEED_OFFSET
    check_int("--seed", args.seed, 0, MAX_SEED - POLICY_SEED_OFFSET - args.blocks * args.seeds)
    check_choice("--env", args.env, sorted(ENVS))
    check_choice("--policy", args.policy, sorted(POLICIES.names()))
    runner.check_run_options(args.jobs, args.backend, args.ray_address)
    if args.csv:
        csv = Path(args.csv)
        check_path_length(csv, "--csv")
        if csv.is_dir():
            raise UserError(f"--csv {args.csv!r} is a folder: expected a CSV file path")
        if csv.exists() or csv.is_symlink():
            raise UserError(f"--csv {args.csv!r} already exists: nothing is overwritten; choose a new path")
        check_writable(csv.parent, "--csv")


def aa_tasks(env: str, policy: str, seeds: list[int], steps: int) -> list[dict]:
    """Runner tasks (results kept in memory): arms "A" and "B" (same policy, policy seeds s
    and s + offset) on environment seed s, for every s of ``seeds`` in order."""
    return [{"id": f"{label}/seed{s}", "dir": None,
             "config": resolve_config({"env": {"kind": env}, "policy": {"name": policy, "label": label}, "seed": s,
                                       "policy_seed": policy_seed, "steps": steps})}
            for s in seeds for label, policy_seed in (("A", s), ("B", s + POLICY_SEED_OFFSET))]


#: share of a breakthrough run's failed attempts that succeed (`skew_arm`)
BREAKTHROUGH = 0.5


def skew_arm(ev: pd.DataFrame, arm: str, q: float, rng: np.random.Generator) -> pd.DataFrame:
    """A mean-zero, right-skewed run effect on the runs of policy ``arm``.

    Per run (rate p = its success rate): with probability q every failed attempt succeeds
    with probability u = min(BREAKTHROUGH, (1 - q) p / (q (1 - p))); otherwise every
    success fails with probability v = q (1 - p) u / ((1 - q) p). Then the run's expected
    success rate is p + q (1 - p) u - (1 - q) p v = p: equal means, skewed spread. A
    changed attempt gets reward 1.0 (success) or 0.0. Rows of other policies unchanged."""
    ev = ev.copy()
    for run_id in sorted(ev.loc[ev["policy"] == arm, "run_id"].unique()):
        rows = (ev["run_id"] == run_id).to_numpy()
        succ = ev.loc[rows, "success"].to_numpy(dtype=bool)
        p = float(succ.mean())
        if p in (0.0, 1.0):
            continue
        u = min(BREAKTHROUGH, (1 - q) * p / (q * (1 - p)))
        flip = rng.random(succ.size)
        if rng.random() < q:
            new = succ | (flip < u)
        else:
            new = succ & ~(flip < q * (1 - p) * u / ((1 - q) * p))
        changed = new != succ
        ev.loc[rows, "success"] = new
        reward = ev.loc[rows, "reward"].to_numpy(dtype=np.float64).copy()
        reward[changed] = new[changed].astype(np.float64)
        ev.loc[rows, "reward"] = reward
    return ev


def block_pvalues(ev: pd.DataFrame, *, resamples: int, rng: np.random.Generator) -> list[dict]:
    """Rows (suite, metric, test, p, delta) of every test of one A/A block (B against A);
    delta = B - A on the metric (the GEE row: on the success rate)."""
    from reports import cells as report_cells, gee, inference, load

    final = load.make_frames(ev).eval
    cells = report_cells.cell_metrics(final, (1,))
    rows = []
    for suite in sorted(final["suite"].unique()):
        metrics = ["pass@1"] if report_cells.score_is_pass1(cells, suite) else ["score", "pass@1"]
        al, _ = report_cells.align(cells, suite, ["A", "B"], "A", metrics)
        tests = inference.paired_tests(al.x[:, 1] - al.x[:, 0], resamples=resamples, rng=rng)
        delta = (al.x[:, 1] - al.x[:, 0]).mean(axis=(1, 2))
        for i, metric in enumerate(metrics):
            rows += [{"suite": suite, "metric": metric, "test": name, "p": float(p[i]), "delta": float(delta[i])}
                     for name, p in tests.items()]
        fit, _ = gee.gee_rows(final, al, suite, "A")
        p = fit[0]["p"] if fit else np.nan
        rows.append({"suite": suite, "metric": "success", "test": "p_gee_seed", "p": float(p),
                     "delta": float(delta[metrics.index("pass@1")])})
    return rows


def calibrate(env: str, policy: str, blocks: int, seeds: int, steps: int, *, resamples: int, seed: int,
              jobs: int | None = None, backend: str = "local", ray_address: str | None = None,
              progress=None, asymmetric: float | None = None) -> pd.DataFrame:
    """Per-block p-values of every test: block, suite, metric, test, p, delta. Block b is the
    environment seeds seed + b S .. seed + (b + 1) S - 1; progress(done, total, failed) counts
    runs. asymmetric: `skew_arm` arm B of every block with that q (generator [seed, block])."""
    rng = np.random.default_rng(seed)
    tasks, n = aa_tasks(env, policy, list(range(seed, seed + blocks * seeds)), steps), 2 * seeds
    index = {t["id"]: i for i, t in enumerate(tasks)}
    evals: dict[int, pd.DataFrame] = {}
    rows: list[dict] = []
    tested = 0

    def on_done(answer: dict) -> None:
        """Test the blocks in order (they share the permutation generator), each once complete."""
        nonlocal tested
        if answer["ok"]:
            evals[index[answer["id"]]] = answer["result"].eval
        while tested < blocks and all(i in evals for i in range(tested * n, tested * n + n)):
            ev = pd.concat([evals.pop(i) for i in range(tested * n, tested * n + n)], ignore_index=True)
            if asymmetric is not None:
                ev = skew_arm(ev, "B", asymmetric, np.random.default_rng([seed, tested, 7]))
            rows.extend({"block": tested, **r} for r in block_pvalues(ev, resamples=resamples, rng=rng))
            tested += 1

    runner.run_many(tasks, jobs=jobs, backend=backend, ray_address=ray_address, progress=progress,
                    on_done=on_done).check()
    return pd.DataFrame(rows)


def fpr_table(pvals: pd.DataFrame, alpha: float) -> pd.DataFrame:
    """False-positive rate per (suite, metric, test) with its exact binomial interval."""
    from reports.inference import false_positive_rates

    parts = []
    for (suite, metric), g in pvals.groupby(["suite", "metric"], sort=True):
        tests = dict(list(g.groupby("test", sort=False)))
        tab = false_positive_rates({t: gg["p"].to_numpy() for t, gg in tests.items()}, alpha)
        trails = []
        for t in tab["test"]:
            gg = tests[t]
            hit = gg["p"].to_numpy(dtype=float) < alpha
            d = gg["delta"].to_numpy(dtype=float) if "delta" in gg else np.full(hit.size, np.nan)
            trails.append(float((d[hit] < 0).mean()) if hit.any() else np.nan)
        parts.append(tab.assign(suite=suite, metric=metric, b_trails=trails))
    out = pd.concat(parts, ignore_index=True)
    return out[["suite", "metric", "test", "blocks", "rejections", "fpr", "fpr_low", "fpr_high", "b_trails"]]


def main(args: argparse.Namespace) -> int:
    _check(args)
    print(f"calibrate: {args.blocks} A/A blocks x {args.seeds} seeds x 2 runs of {args.policy} on {args.env}, "
          f"{args.steps} steps", file=sys.stderr)
    pvals = calibrate(args.env, args.policy, args.blocks, args.seeds, args.steps, resamples=args.resamples,
                      seed=args.seed, jobs=args.jobs, backend=args.backend, ray_address=args.ray_address,
                      progress=runner.ProgressBar(noun="runs"), asymmetric=args.asymmetric)
    if args.csv:
        Path(args.csv).parent.mkdir(parents=True, exist_ok=True)    # checked writable before the runs
        remove_temp(Path(args.csv).parent, Path(args.csv).name)      # a killed call's temporary of this CSV
        # linked into place, never replacing a file (another run's CSV that appeared meanwhile is refused)
        atomic_write(args.csv, lambda tmp: pvals.to_csv(tmp, index=False), exclusive=True)
    table = fpr_table(pvals, args.alpha)
    print(f"A/A calibration: {args.policy} vs {args.policy} (policy seeds differ, environment seeds shared) on "
          f"{args.env}, {args.blocks} blocks x {args.seeds} seeds, {args.steps} steps; false-positive rate at "
          f"alpha = {args.alpha} (exact binomial 95% interval; a valid test is near {args.alpha})")
    if args.asymmetric is not None:
        print(f"asymmetric: arm B's runs break through with probability {args.asymmetric} and otherwise trail "
              "slightly, every run's expected success rate unchanged (equal means, skewed run effects); the seed-level "
              "tests test 'no effect' (runs of a seed exchangeable), so a rate above alpha here is what they are "
              "built to detect, not a false claim about means; 'B trails' = share of the rejections with delta < 0")
    print(f"  {'suite':<16} {'metric':<8} {'test':<19} {'p < alpha':>9}  {'FPR':>5}  {'95% interval':>14}  "
          f"{'B trails':>8}")
    for r in table.itertuples(index=False):
        trails = f"{r.b_trails:8.2f}" if np.isfinite(r.b_trails) else f"{'':>8}"
        print(f"  {r.suite:<16} {r.metric:<8} {r.test:<19} {f'{r.rejections}/{r.blocks}':>9}  {r.fpr:5.2f}  "
              f"[{r.fpr_low:.2f}, {r.fpr_high:.2f}]  {trails}")
    print("  p_seed*: tests over seeds (the replication unit); p_task*: over tasks, conditional on the trained "
          "models; p_gee_seed: GEE logistic clustered by seed")
    return 0
