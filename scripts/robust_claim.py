"""Checks issue 29's claim for `harnessbandit_robust` on a finished `hb stress` grid and
prints PASS / FAIL per claim, at equal steps and at equal groups.

    hb stress --scenarios trap,dead,saturation,coverage,churn \\
        --policies harnessbandit_robust,harnessbandit,sec,variance,tac,dts,exp3s,mixed --jobs 1 --out DIR
    python scripts/robust_claim.py DIR

It reads only the grid's outputs: DIR/stress/profile.csv (equal steps: the profile's own
cells, their delta, share and Benjamini-Hochberg q over every cell of the profile) and
DIR/train.parquet, DIR/eval.parquet (the paired seed-level values). A cell is one row of the
profile: a scenario, and once issue 28's axes are merged its `horizon` and `step_scale`
columns (the grid part `hbsim.contract.labels.part_name` names, e.g. `trap@3x`); the claim must
hold in each. The claims, on the test
scenarios (policies/robust.py TEST_SCENARIOS, never used for tuning):

1. the policy is never significantly below `uniform` (delta < 0 with BH q < 0.05 over cells);
2. its median share of the achievable gain over the test cells is at least 0.5
   (`--share-column`, default `share`; cells whose share is not printed are left out);
3. it is not significantly below the paper's `harnessbandit` in `trap` (paired seed-level
   t-test of the per-seed difference, p < 0.05, in every trap cell).

Equal groups: every run read at the same number of generated groups, the largest every run
of the scenario reached (cumulative `groups_generated` of the train table), by linear
interpolation between the two steps that bracket it, of the EXACT expected score of the
scenario's target (`hbsim.scenarios.target_truth` on the train table: train = the mean of
the training harnesses' `true_*` columns, as the profile's train score; heldout_* =
`true_heldout_*`, where the profile's equal-steps value is the sampled evaluation). There the same three tests run, BH over the
equal-groups cells, share = mean_s (P_s - U_s) / mean_s (O_s - U_s) (the profile's
point estimate, `reports.readings.references.point_share`). Exit code 0 when every claim passes, 1 if not.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from hbsim.contract.labels import of_part, part_name, part_scenario
from ablations.scenarios import equal_groups
from policies.robust import TEST_SCENARIOS
from policies.validate import comma_items
from reports.stats import adjust, t_test_p
from reports.readings.references import point_share
from reports.stress import ALPHA, scores_of

#: the profile's axis columns beside the scenario, where present (issue 28's yardstick)
AXES = ("horizon", "step_scale")
SIDE_BY_SIDE = ("harnessbandit_robust", "harnessbandit", "sec", "variance", "tac", "dts", "exp3s", "mixed")


def with_parts(prof: pd.DataFrame) -> pd.DataFrame:
    """The profile with a `part` column: the grid part of each cell (scenario x axis)."""
    if not all(a in prof.columns for a in AXES):
        return prof.assign(part=prof["scenario"])
    return prof.assign(part=[part_name(r.scenario, int(r.horizon), float(r.step_scale)) for r in prof.itertuples()])


# -- equal groups ---------------------------------------------------------------------
def groups_profile(train: pd.DataFrame, prof: pd.DataFrame, policies: list[str], baseline: str) -> pd.DataFrame:
    """The equal-groups cells: one row per (scenario, policy) with delta, share, p and BH q."""
    rows = []
    for part, target in prof.drop_duplicates("part")[["part", "target"]].itertuples(index=False):
        wide, milestone = equal_groups(train, part, target)
        oracle = next(c for c in wide.columns if c.split("[", 1)[0] == "oracle")   # oracle[target=...]
        gap = wide[oracle] - wide[baseline]
        for pol in policies:
            if pol not in wide:
                continue
            d = (wide[pol] - wide[baseline]).dropna().to_numpy()
            rows.append({"scenario": part_scenario(part), "part": part, "target": target, "policy": pol,
                         "groups": milestone,
                         "delta": float(d.mean()), "share": point_share(d, gap.to_numpy()),
                         "p": t_test_p(d)})
    out = pd.DataFrame(rows)
    out["q"] = adjust(out["p"].to_numpy(), "fdr_bh")
    return out


# -- the claims ------------------------------------------------------------------------
def check(cells: pd.DataFrame, paired: dict, policy: str, share_column: str) -> list[tuple[str, bool, str]]:
    """[(claim, passed, detail)] on the test cells of one reading (equal steps or groups)."""
    mine = cells[cells["policy"] == policy]
    below = mine[(mine["delta"] < 0) & (mine["q"] < ALPHA)]
    shares = mine[share_column].to_numpy(dtype=float)
    shares = shares[np.isfinite(shares)]
    median = float(np.median(shares)) if shares.size else float("nan")
    trap_bad = [k for k, (mean, p) in paired.items() if mean < 0 and p < ALPHA]
    return [
        ("1 never significantly below uniform", below.empty,
         "none" if below.empty else ", ".join(f"{r.part} delta {r.delta:+.3f} q {r.q:.3f}"
                                              for r in below.itertuples())),
        ("2 median share >= 0.5", median >= 0.5, f"median {median:+.2f} over {shares.size} cells"),
        ("3 not significantly below harnessbandit in trap", bool(paired) and not trap_bad,
         "no trap cell" if not paired else "; ".join(f"{k}: mean diff {m:+.4f} p {p:.3f}"
                                                     for k, (m, p) in paired.items())),
    ]


def paired_vs(wides: dict, policy: str, paper: str) -> dict:
    """{trap part: (mean per-seed difference policy - paper, t-test p)} from per-part wide tables."""
    out = {}
    for part, wide in wides.items():
        if part_scenario(part) == "trap" and policy in wide and paper in wide:
            d = (wide[policy] - wide[paper]).dropna().to_numpy()
            out[part] = (float(d.mean()), t_test_p(d))
    return out


def steps_wides(train: pd.DataFrame, evals: pd.DataFrame, prof: pd.DataFrame) -> dict:
    """{part: seed x policy table of the final score on the part's target} (the profile's scores)."""
    scores = scores_of(train, evals)
    out = {}
    for part, target in prof.drop_duplicates("part")[["part", "target"]].itertuples(index=False):
        mine = of_part(scores[scores["suite"] == target], "policy", part)
        out[part] = mine.pivot_table(index="seed", columns="policy", values="score")
    return out


def _print_side_by_side(steps: pd.DataFrame, groups: pd.DataFrame, policies: list[str]) -> None:
    def mark(r) -> str:
        return f"{r.share:+.2f}{'*' if r.q < ALPHA else ' '}"
    print("share of the achievable gain (* = BH q < 0.05 against uniform); equal steps | equal groups")
    print(f"{'scenario':<14}" + "".join(f"{p[:20]:>22}" for p in policies))
    for part in steps["part"].drop_duplicates():
        line = f"{part:<14}"
        for pol in policies:
            a = steps[(steps["part"] == part) & (steps["policy"] == pol)]
            b = groups[(groups["part"] == part) & (groups["policy"] == pol)]
            cell = (mark(next(a.itertuples())) if len(a) else "   -  ") + " | " + \
                   (mark(next(b.itertuples())) if len(b) else "   -  ")
            line += f"{cell:>22}"
        print(line)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", help="a finished hb stress grid directory")
    parser.add_argument("--policy", default="harnessbandit_robust")
    parser.add_argument("--paper", default="harnessbandit")
    parser.add_argument("--baseline", default="uniform")
    parser.add_argument("--scenarios", default=",".join(TEST_SCENARIOS), help="the test scenarios")
    parser.add_argument("--share-column", default="share", help="the profile's share column")
    args = parser.parse_args(argv)
    root = Path(args.dir)
    prof = pd.read_csv(root / "stress" / "profile.csv")
    tests = set(comma_items(args.scenarios))
    prof = with_parts(prof[prof["scenario"].map(part_scenario).isin(tests)])
    if prof.empty or args.policy not in set(prof["policy"]):
        print(f"{root}: no {args.policy} rows on the scenarios {sorted(tests)} in the profile", file=sys.stderr)
        return 2
    train, evals = pd.read_parquet(root / "train.parquet"), pd.read_parquet(root / "eval.parquet")
    policies = [p for p in SIDE_BY_SIDE if p in set(prof["policy"])]
    wides = steps_wides(train, evals, prof)
    groups = groups_profile(train, prof, policies, args.baseline)
    _print_side_by_side(prof, groups, policies)
    if "reference" in prof.columns and set(prof["reference"].dropna()) - {"oracle"}:
        print("note: the profile's share uses the best reachable reference "
              f"({', '.join(sorted(set(prof['reference'].dropna())))}); the equal-groups share uses the oracle")
    print(f"equal groups: milestones {', '.join(f'{r.part} {r.groups:.0f}' for r in groups.drop_duplicates('part').itertuples())}")
    gwides = {part: equal_groups(train, part, target)[0]
              for part, target in prof.drop_duplicates("part")[["part", "target"]].itertuples(index=False)}
    ok = True
    for name, cells, share_col, pw in (("equal steps", prof, args.share_column, wides),
                                       ("equal groups", groups, "share", gwides)):
        for claim, passed, detail in check(cells, paired_vs(pw, args.policy, args.paper), args.policy, share_col):
            ok &= passed
            print(f"{'PASS' if passed else 'FAIL'}  [{name}] claim {claim}: {detail}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
