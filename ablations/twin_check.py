"""`hb twin check --twin TWIN.toml --real DIR`: does the twin rank scheduling policies as the real runs do?

The real runs (a grid directory of cells, an `hb sim --out` folder: several policies, several
seeds each) fix the question: each policy's score is the mean reward of its final evaluation
on `--suite` (`reports.readings.summary.final_scores`), averaged over seeds. The same policies (their
run.json policy sections), the same seeds, steps and batch size are then run in three worlds:

    twin       the fitted twin (TWIN.toml)
    closest    the shipped scenario nearest to the twin by `hbsim.twin.world_distance` (the
               Euclidean distance of the worlds' features: sorted initial success, own and
               cross one-step gains, the mixed batch's gain ratio), among those with as many
               harnesses as the real runs
    bernoulli  the default bernoulli env with that many harnesses

and for each world the agreement of its ranking with the real one is reported: Kendall's tau
and Spearman's rho of the per-policy means (scipy.stats), each with a percentile bootstrap
interval over seeds (the same seed resamples for the real runs and the world, paired by seed;
`reports.readings.intervals.percentile_interval`), the top-1 regret (the real score of the real best
policy minus that of the world's best, >= 0), and the mean absolute error of each policy's
share of the achievable gain (`reports.readings.references.share_of_gap`, where both sides have one).
Policies that need the world's ground truth (`oracle`) take part in the shares only, never
in the ranking; so do policies run on fewer seeds than the ranked ones (`complete_labels`: the
rankings are compared on the same seeds), which the table names. Output: a printed table, and
with --out a folder of kind `twin_check` holding check.json and check.md.
"""
from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from ablations import runner
from hbsim import scenarios, twin
from reports.readings import intervals
from hbsim.contract.atomic import atomic_write, visible
from hbsim.contract import CELLS, EVAL_FILE, RUN_JSON, TRAIN_FILE
from hbsim.experiment import resolve_config
from hbsim.contract.folders import check_output_dir
from hbsim.contract.markers import output_dir
from hbsim.contract.records import canonical_json, is_complete, read_meta, read_table
from reports.readings.references import run_table, share_of_gap
from reports.readings.summary import final_scores
from policies import POLICIES
from policies.errors import UserError
from policies.validate import MAX_RESAMPLES, check_int, comma_items

#: the folder kind of `hb twin check --out` (hbsim.contract.folders)
KIND = "twin_check"
CHECK_JSON, CHECK_MD = "check.json", "check.md"
WORLDS = ("twin", "closest", "bernoulli")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--twin", required=True, metavar="TWIN.toml", help="the twin (hb twin fit --out)")
    parser.add_argument("--real", required=True, metavar="DIR", help="real runs of several policies and seeds "
                                                                     "(a grid directory or an hb sim folder)")
    parser.add_argument("--out", default=None, metavar="DIR", help="also write DIR/check.json and DIR/check.md")
    parser.add_argument("--suite", default="heldout_tasks", help="the eval suite that scores a run "
                                                                "(default heldout_tasks)")
    parser.add_argument("--resamples", type=int, default=1000, help="seed-bootstrap resamples (default 1000)")
    parser.add_argument("--seed", type=int, default=0, help="the bootstrap's generator seed (default 0)")
    parser.add_argument("--force", action="store_true", help="write into an --out folder hb did not create")
    runner.add_run_options(parser)


def run_dirs(folder: str | Path, flag: str = "--real") -> list[Path]:
    """The complete run directories of a run directory, a grid directory (cells/) or a folder
    of run directories up to two levels down (`hb sim --out`: <label>/seed<s>/), sorted."""
    root = Path(folder)
    if not root.is_dir():
        found = ("not found" if not root.exists() else "is a file, expected a folder" if root.is_file()
                 else "is a named pipe, a device or a socket, expected a folder")
        raise UserError(f"{flag} {str(root)!r}: {found} (a run directory, an hb sim folder or a grid)")
    if is_complete(root):
        return [root]
    if (root / CELLS).is_dir():
        return sorted(p for p in visible(root / CELLS) if p.is_dir() and is_complete(p))
    found = []
    for child in sorted(p for p in visible(root) if p.is_dir()):
        found += [child] if is_complete(child) else sorted(p for p in visible(child) if p.is_dir() and is_complete(p))
    return found


def train_harnesses(run_dir: Path) -> list[str]:
    """The training harnesses of a run (its train table's `alloc_<harness>` columns), from the
    parquet schema only."""
    path = run_dir / TRAIN_FILE
    try:
        names = pq.read_schema(path).names
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise UserError(f"{str(path)!r} is missing or not a readable parquet table ({str(exc).splitlines()[0][:200]}); "
                        "allowed: the parquet table hb writes") from None
    return [c[len("alloc_"):] for c in names if c.startswith("alloc_")]


def real_runs(folder: str) -> list[dict]:
    """Every complete run of `folder`: its policy section, seed, steps, batch size, final scores
    and training harnesses; each run's policy must be registered (a plugin's: `hb --plugin`)."""
    out = []
    for d in run_dirs(folder):
        meta = read_meta(d) or {}
        cfg = meta.get("config") or {}
        policy = dict(cfg.get("policy") or {"name": meta.get("policy", ""), "label": meta.get("label", "")})
        if policy.get("name") not in POLICIES:
            raise UserError(f"{str(d / RUN_JSON)!r}: policy {policy.get('name')!r} is not registered in this hb; "
                            "allowed: a shipped policy or a plugin's (load it: hb --plugin MODULE twin check ...)")
        evals = read_table(d / EVAL_FILE)
        out.append({"meta": meta, "policy": policy, "seed": int(meta.get("seed", cfg.get("seed", 0))),
                    "steps": int(cfg.get("steps", meta.get("steps", 0))), "batch_groups": cfg.get("batch_groups"),
                    "scores": final_scores(evals), "harnesses": train_harnesses(d), "dir": d})
    if not out:
        raise UserError(f"--real {folder!r} holds no complete run (no run.json below it)")
    return out


def check_same_harnesses(twin_file: str, env: dict, runs: list[dict]) -> None:
    """The real runs train on the twin's harnesses (names where the twin records them, else
    their number): a twin of other harnesses cannot say how they rank."""
    named = comma_items(str(env.get("harness_names") or ""))
    for run in runs:
        mine = run["harnesses"]
        same = mine == named if named else len(mine) == int(env.get("n_harnesses", 6))
        if not same:
            theirs = ", ".join(named) if named else f"{env.get('n_harnesses', 6)} harnesses"
            raise UserError(f"--real: {str(run['dir'] / TRAIN_FILE)!r} trains on {', '.join(mine) or 'no harness'}, "
                            f"but the twin {twin_file!r} on {theirs}; allowed: real runs on the twin's harnesses")


def closest_scenario(twin_env: dict, n_harnesses: int) -> tuple[str | None, dict]:
    """(name, {name: distance}) of the shipped scenarios with `n_harnesses` harnesses."""
    mine = twin.world_quantities(twin_env)
    dist = {}
    for name, sc in scenarios.SCENARIOS.items():
        if sc.env.get("n_harnesses", 6) != n_harnesses:
            continue
        dist[name] = twin.world_distance(mine, twin.world_quantities(sc.env))
    return (min(dist, key=dist.get) if dist else None), dist


def world_configs(env: dict, runs: list[dict], where: str = "") -> list[dict]:
    """The resolved run configs of the real runs' policies and seeds in world `env`; a
    policy that cannot run there (a fixed arm beyond its harnesses) is one line naming
    the run's record and `where` (the world's file)."""
    configs = []
    for run in runs:
        raw = {"env": dict(env), "policy": dict(run["policy"]), "seed": run["seed"], "steps": run["steps"]}
        if run["batch_groups"] is not None:
            raw["batch_groups"] = run["batch_groups"]
        try:
            configs.append(resolve_config(raw))
        except UserError as exc:
            raise UserError(f"{str(Path(run.get('dir', '.')) / RUN_JSON)!r}: its policy "
                            f"{run['policy'].get('label') or run['policy'].get('name')!r} cannot run in {where or 'the world'}: "
                            f"{exc}") from None
    return configs


def run_world(configs: list[dict], args) -> list:
    """RunResults of `configs`, in memory (ablations.runner.run_many), in the configs' order."""
    tasks = [{"id": f"{i}", "config": c} for i, c in enumerate(configs)]
    kept = {}
    runner.run_many(tasks, jobs=args.jobs, backend=args.backend, ray_address=args.ray_address,
                    progress=runner.ProgressBar(noun="runs"),
                    on_done=lambda a: kept.update({a["id"]: a.get("result")})).check()
    return [kept[t["id"]] for t in tasks]


# -- agreement -------------------------------------------------------------------------------
def ranking_labels(runs: pd.DataFrame) -> list[str]:
    """The labels that are ranked: every policy but those needing the world's ground truth."""
    keep = [r.label for r in runs.drop_duplicates("label").itertuples()
            if not getattr(POLICIES[r.name], "needs_ground_truth", False) if r.name in POLICIES]
    return keep


#: the fewest policies a ranking is read on when the real runs' seed counts differ (complete_labels)
MIN_RANKED = 3


def complete_labels(real: pd.DataFrame, labels: list[str]) -> tuple[list[str], dict[str, int], list]:
    """(the labels ranked, label -> its seed count for those left out, the seeds the ranking is
    read on): the rankings are compared on the same seeds for every policy (the bootstrap
    resamples seeds, paired across policies). Where the real runs hold policies on different
    seeds (fixed arms on 2 seeds beside designs on 3, say), the seeds are the largest set that
    at least MIN_RANKED policies share (all of them where fewer are rankable), and the policies
    ranked are those run on every one of those seeds; the others still count in the
    share-of-gap references. real: (policy, seed, score)."""
    seeds = {lab: frozenset(real.loc[real["policy"] == lab, "seed"]) for lab in labels}
    need = min(MIN_RANKED, len(labels))
    sets = sorted(set(seeds.values()), key=lambda c: (-len(c), sorted(c)))
    common = next((c for c in sets if sum(c <= own for own in seeds.values()) >= need), frozenset())
    kept = [lab for lab in labels if common and common <= seeds[lab]]
    return kept, {lab: len(seeds[lab]) for lab in labels if lab not in kept}, sorted(common)


def agreement(real: pd.DataFrame, world: pd.DataFrame, labels: list[str], *, resamples: int, seed: int,
              level: float = 0.95) -> dict:
    """real, world: (policy, seed, score) of one suite. Kendall tau and Spearman rho of the
    per-policy means with their seed-bootstrap intervals, top-1 regret (module docstring)."""
    from scipy import stats

    R = real.pivot_table(index="seed", columns="policy", values="score")[labels]
    W = world.pivot_table(index="seed", columns="policy", values="score")[labels]
    seeds = R.index.intersection(W.index)
    R, W = R.loc[seeds].to_numpy(), W.loc[seeds].to_numpy()                   # (seeds, policies)

    def both(r, w):
        with warnings.catch_warnings():        # tied means (a constant input): nan, counted as no agreement
            warnings.simplefilter("ignore")
            return float(stats.kendalltau(r, w).statistic), float(stats.spearmanr(r, w).statistic)

    tau, rho = both(R.mean(axis=0), W.mean(axis=0))
    idx = np.random.default_rng(seed).integers(len(seeds), size=(resamples, len(seeds)))
    reps = np.array([both(R[i].mean(axis=0), W[i].mean(axis=0)) for i in idx])   # (resamples, 2)
    reps = np.where(np.isfinite(reps), reps, 0.0)          # a resample with tied means: no agreement
    lo, hi = intervals.percentile_interval(reps, level) if len(seeds) > 1 else (np.full(2, np.nan),) * 2
    real_mean, world_mean = R.mean(axis=0), W.mean(axis=0)
    regret = float(real_mean.max() - real_mean[int(np.argmax(world_mean))])
    return {"policies": len(labels), "seeds": int(len(seeds)), "tau": tau, "tau_lo": float(lo[0]),
            "tau_hi": float(hi[0]), "rho": rho, "rho_lo": float(lo[1]), "rho_hi": float(hi[1]),
            "top1_regret": regret, "real_best": labels[int(np.argmax(real_mean))],
            "world_best": labels[int(np.argmax(world_mean))],
            "means": {lab: [float(a), float(b)] for lab, a, b in zip(labels, real_mean, world_mean)}}


def chance_tau(policies: int, level: float = 0.95) -> float:
    """The `level` quantile of the Kendall tau of a ranking drawn at random against a fixed one
    (over every permutation of `policies` items, exact up to 8, by 10^5 seeded draws beyond; the
    quantile is a value tau takes): an agreement below it is within what chance gives."""
    from itertools import permutations

    from scipy import stats

    base = np.arange(policies)
    if policies <= 8:
        orders = np.array(list(permutations(base)))
    else:
        rng = np.random.default_rng(0)
        orders = np.array([rng.permutation(policies) for _ in range(100_000)])
    taus = np.array([stats.kendalltau(base, o).statistic for o in orders])
    return float(np.quantile(taus, level, method="higher"))


def uniform_baseline(real: pd.DataFrame, labels: list[str], runs: pd.DataFrame) -> dict | None:
    """"Always pick uniform" (no world at all): its top-1 regret, the real best policy's mean
    minus uniform's (None where the real runs hold no built-in uniform)."""
    names = dict(zip(runs["label"], runs["name"])) if "name" in runs else {}
    uniform = [lab for lab in labels if names.get(lab) == "uniform"]
    if not uniform:
        return None
    means = real.groupby("policy")["score"].mean().reindex(labels)
    return {"label": uniform[0], "top1_regret": float(means.max() - means[uniform[0]])}


def share_error(real: pd.DataFrame, world: pd.DataFrame, runs: pd.DataFrame, suite: str) -> tuple[float, int]:
    """(mean |share_world - share_real|, policies compared) on `suite` (nan, 0 without shares)."""
    a = share_of_gap(real, runs)
    b = share_of_gap(world, runs)
    if a.empty or b.empty:
        return float("nan"), 0
    both = a[a["suite"] == suite].merge(b[b["suite"] == suite], on=["policy", "suite"], suffixes=("_r", "_w"))
    err = (both["share_w"] - both["share_r"]).abs().dropna()
    return (float(err.mean()) if len(err) else float("nan")), int(len(err))


# -- the command -----------------------------------------------------------------------------
def main(args: argparse.Namespace) -> int:
    check_int("--resamples", args.resamples, 1, MAX_RESAMPLES)
    check_int("--seed", args.seed, 0)
    runner.check_run_options(args.jobs, args.backend, args.ray_address)
    sc = scenarios.get(args.twin)
    runs = real_runs(args.real)
    check_same_harnesses(args.twin, sc.env, runs)
    H = int(sc.env.get("n_harnesses", 6))
    world_configs(sc.env, runs, f"the twin {args.twin!r}")         # every policy runs there, checked before work
    if args.out is not None:
        check_output_dir(args.out, KIND, force=args.force)
    start = time.perf_counter()
    name, distances = closest_scenario(sc.env, H)
    worlds = {"twin": sc.env, "bernoulli": {"kind": "bernoulli", "n_harnesses": H}}
    if name is not None:
        worlds["closest"] = scenarios.SCENARIOS[name].env
    real_scores = pd.concat([r["scores"] for r in runs], ignore_index=True)
    suites = set(real_scores["suite"])
    if args.suite not in suites:
        raise UserError(f"--suite {args.suite!r} is not in the real runs' evaluations; valid: {', '.join(sorted(suites))}")
    table = run_table(r["meta"] for r in runs)
    labels, fewer, on_seeds = complete_labels(real_scores[real_scores["suite"] == args.suite], ranking_labels(table))
    real_scores = real_scores[real_scores["seed"].isin(on_seeds) | ~real_scores["policy"].isin(labels)]
    real_suite = real_scores[real_scores["suite"] == args.suite]
    if len(labels) < 2:
        raise UserError(f"--real {args.real!r}: policies run on the same seeds: {len(labels)} "
                        f"({', '.join(labels) or 'none'}); expected at least 2 to rank")
    rows = {}
    for world, env in worlds.items():
        print(f"hb twin check: {world} ({name if world == 'closest' else env['kind']}): {len(runs)} runs", file=sys.stderr)
        results = run_world(world_configs(env, runs), args)
        scores = final_scores(pd.concat([r.eval for r in results], ignore_index=True))
        row = agreement(real_suite, scores[scores["suite"] == args.suite],
                        labels, resamples=args.resamples, seed=args.seed)
        row["share_error"], row["share_policies"] = share_error(real_scores, scores, table, args.suite)
        row["world"] = name if world == "closest" else ("twin: " + sc.name if world == "twin" else "bernoulli (default)")
        rows[world] = row
    per_policy = real_suite[real_suite["policy"].isin(labels)].groupby("policy")["seed"].nunique()
    record = {"twin": sc.record(), "real": str(Path(args.real).resolve()), "suite": args.suite,
              "resamples": args.resamples, "seed": args.seed, "closest": name, "distances": distances,
              "worlds": rows, "real_runs": int(len(real_suite[real_suite["policy"].isin(labels)])),
              "real_seeds": {"min": int(per_policy.min()), "max": int(per_policy.max())},
              "chance_tau95": chance_tau(len(labels)), "always_uniform": uniform_baseline(real_suite, labels, table),
              "not_ranked": fewer,
              "seconds": time.perf_counter() - start}
    text = check_table(record)
    print(text)
    if args.out is not None:
        with output_dir(args.out, KIND, tool="hb twin check"):     # a rerun replaces the check (checked above)
            atomic_write(Path(args.out) / CHECK_JSON, canonical_json(record) + "\n")
            atomic_write(Path(args.out) / CHECK_MD, "# hb twin check\n\n" + text + "\n")
        print(f"hb twin check: wrote {Path(args.out) / CHECK_JSON} and {CHECK_MD}", file=sys.stderr)
    return 0


def check_table(record: dict) -> str:
    """The printed agreement table: one row per world."""
    head = (f"rank agreement with the real runs ({record['suite']}, final evaluation; "
            f"{next(iter(record['worlds'].values()))['policies']} policies x "
            f"{next(iter(record['worlds'].values()))['seeds']} seeds; 95% seed-bootstrap intervals)")
    cols = ["world", "Kendall tau", "Spearman rho", "top-1 regret", "share error", "world's best"]
    body = []
    for row in record["worlds"].values():
        share = f"{row['share_error']:.3f} ({row['share_policies']})" if np.isfinite(row["share_error"]) else "-"
        body.append([row["world"], f"{row['tau']:+.2f} [{row['tau_lo']:+.2f}, {row['tau_hi']:+.2f}]",
                     f"{row['rho']:+.2f} [{row['rho_lo']:+.2f}, {row['rho_hi']:+.2f}]", f"{row['top1_regret']:.4f}",
                     share, row["world_best"]])
    widths = [max(len(c), *(len(b[i]) for b in body)) for i, c in enumerate(cols)]
    fmt = lambda cells: "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"   # noqa: E731
    lines = [head, "", fmt(cols), "|" + "|".join("-" * (w + 2) for w in widths) + "|"] + [fmt(b) for b in body]
    best = next(iter(record["worlds"].values()))["real_best"]
    lines.append("")
    lines.append(f"real best policy: {best}; closest shipped scenario: {record['closest']} "
                 f"(distance {record['distances'].get(record['closest'], float('nan')):.2f})")
    if "real_runs" in record:
        seeds = record["real_seeds"]
        count = f"{seeds['min']}" if seeds["min"] == seeds["max"] else f"{seeds['min']} to {seeds['max']}"
        lines.append(f"the figures rest on {record['real_runs']} real runs: {count} seeds per ranked policy; chance: "
                     f"the 95th percentile of Kendall tau of a random ranking of "
                     f"{next(iter(record['worlds'].values()))['policies']} policies is {record['chance_tau95']:+.2f}")
        if record.get("not_ranked"):
            lines.append("not ranked (fewer seeds than the ranked policies): "
                         + ", ".join(f"{lab} ({n})" for lab, n in record["not_ranked"].items()))
        base = record.get("always_uniform")
        lines.append(f"always pick uniform (no world): top-1 regret {base['top1_regret']:.4f}" if base else
                     "always pick uniform: no built-in uniform among the real runs")
    return "\n".join(lines)


__all__ = ["KIND", "agreement", "chance_tau", "closest_scenario", "complete_labels", "main", "real_runs", "share_error",
           "uniform_baseline"]
