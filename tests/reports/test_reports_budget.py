"""`hb report --budget`: designs compared at exactly one cost milestone (reports.budget)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from hbsim.cli import main as hb_main
from policies.errors import UserError
from reports import budget, load, stats
from reports.readings import at_cost

ENV = ["--set", "env.n_harnesses=3", "--set", "env.n_tasks=30", "--set", "env.n_heldout_tasks=6",
       "--set", "env.k_attempts=2", "--set", 'env.group_tokens="100,300,900"']


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    out = tmp_path_factory.mktemp("budget") / "sim"
    assert hb_main(["sim", "--env", "bernoulli", "--policy", "uniform", "--policy", "harnessbandit", "--seeds", "3",
                    "--steps", "12", "--eval-budget", "tokens:2000,8000,1e9", "--eval-every", "2", "--out", str(out),
                    "--jobs", "1", *ENV]) == 0
    return out


def test_step_rows_drop_budget_and_validation_rows():
    ev = pd.DataFrame({"suite": ["heldout_tasks", "validation", "heldout_tasks"],
                       "budget_unit": [None, None, "groups"], "reward": [1.0, 0.0, 0.5]})
    assert load.step_rows(ev)["reward"].tolist() == [1.0]


def _rows(run, pol, seed, step, rewards, budget_value=None, reached=None):
    """Eval rows of one evaluation: one task 't' of suite s with len(rewards) attempts."""
    return pd.DataFrame({"run_id": run, "policy": pol, "seed": seed, "step": step, "suite": "s", "task": "t",
                         "category": "c", "harness": "h", "attempt": range(len(rewards)),
                         "success": [r >= 1 for r in rewards], "reward": rewards,
                         "budget_unit": None if budget_value is None else "tokens",
                         "budget_value": budget_value, "cost_reached": reached})


def test_select_interpolates_between_the_bracketing_evaluations_by_hand():
    # run a: steps cost 300 tokens; evaluations at steps 0, 2 (cost 600) and the crossing of 1000 at step 4
    # (cost 1200): read at w = (1000 - 600) / (1200 - 600) = 2/3 of the way from step 2 to step 4.
    # run b: its crossing is at exactly 1000 (step 1): read there, no interpolation.
    raw = pd.concat([_rows("a", "A", 0, 0, [0.0, 0.0]), _rows("a", "A", 0, 2, [1.0, 0.0]),
                     _rows("a", "A", 0, 4, [1.0, 1.0], 1000.0, 1200.0),
                     _rows("b", "B", 0, 0, [0.0, 0.0]), _rows("b", "B", 0, 1, [1.0, 0.0], 1000.0, 1000.0)],
                    ignore_index=True)
    train = pd.DataFrame({"run_id": ["a"] * 4 + ["b"], "policy": ["A"] * 4 + ["B"], "seed": 0,
                          "step": [1, 2, 3, 4, 1], "tokens": [300.0] * 4 + [1000.0]})
    upper, lower, table = budget.select(raw, train, "tokens", 1000.0)
    t = table.set_index("run_id")
    assert t.loc["a", ["step_below", "cost_below", "step_above", "cost_above", "cost_read", "rule"]].tolist() == \
        [2, 600.0, 4, 1200.0, 1000.0, "interpolated"]
    assert t.loc["a", "weight"] == pytest.approx(2 / 3)
    assert t.loc["b", "rule"] == "exact" and t.loc["b", "cost_read"] == 1000.0 and t.loc["b", "weight"] == 1.0
    assert set(lower["run_id"]) == {"a"} and set(lower["step"]) == {2}
    fr = load.make_frames(upper, train)
    cells = budget.cells_at(fr, {"lower": load.validate_eval(lower), "table": table}, (1, 2)).set_index("policy")
    # pass@1: 1/3 * 0.5 + 2/3 * 1.0; pass@2 (both attempts pass): 1/3 * 0 + 2/3 * 1; pass@2 at least one: 1
    assert cells.loc["A", "pass@1"] == pytest.approx(1 / 6 + 2 / 3)
    assert cells.loc["A", "pass^2"] == pytest.approx(2 / 3) and cells.loc["A", "pass@2"] == pytest.approx(1.0)
    assert cells.loc["B", "pass@1"] == 0.5
    assert at_cost.step_costs(train, "tokens").query("run_id == 'a'")["cost"].tolist() == [0, 300, 600, 900, 1200]
    # seconds: the measured rollout + tools time where nothing is simulated (hbsim.loop.step_cost)
    sec = train.assign(cost_seconds=[np.nan, 1.0, np.nan, np.nan, 2.0], seconds_rollout=0.5, seconds_tools=0.25)
    assert at_cost.step_costs(sec, "seconds").query("run_id == 'a'")["cost"].tolist() == [0, 0.75, 1.75, 2.5, 3.25]


def test_a_run_that_cannot_be_interpolated_is_refused_beyond_the_tolerance():
    raw = pd.concat([_rows("a", "A", 0, 3, [1.0], 1000.0, 1040.0), _rows("b", "B", 0, 1, [1.0], 1000.0, 1300.0)],
                    ignore_index=True)
    with pytest.raises(UserError, match=r"^--budget tokens: the cost read at the milestone 1000 differs by more than "
                                        r"5% \(--cost-tolerance\) for design\(s\) B \(up to 1.30x\), and no "
                                        r"evaluation below"):
        budget.select(raw, None, "tokens", 1000.0)
    _, _, table = budget.select(raw, None, "tokens", 1000.0, tolerance=0.3)
    assert table["rule"].tolist() == ["past", "past"] and table["cost_read"].tolist() == [1040.0, 1300.0]
    with pytest.raises(UserError, match=r"^--cost-tolerance: got 1.5, allowed: a fraction 0 <= t < 1"):
        budget.check_tolerance(1.5)


def test_frames_at_the_largest_common_milestone(sim):
    frames, info = budget.frames_at(sim, "tokens")
    assert info["at"] == 8000.0 and info["largest"]
    table = info["table"]
    assert (table["cost_read"] == 8000.0).all() and set(table["rule"]) == {"interpolated"}
    assert (table["cost_below"] < 8000).all() and (table["cost_above"] >= 8000).all()
    raw = pd.concat([pd.read_parquet(p) for p in sorted(sim.glob("*/*/eval.parquet"))], ignore_index=True)
    want = raw[(raw["budget_unit"] == "tokens") & (raw["budget_value"] == 8000.0)]
    assert len(frames.eval) == len(want) and frames.eval["reward"].sum() == pytest.approx(want["reward"].sum())
    # each run's upper evaluation is at the step where its tokens first reached 8000, the lower at the last
    # evaluation below it (an ordinary one, every 2 steps, or the one at the 2000 milestone); the train rows
    # stop at the upper step
    tr = pd.concat([pd.read_parquet(p) for p in sorted(sim.glob("*/*/train.parquet"))], ignore_index=True)
    for (pol, seed), g in tr.groupby(["policy", "seed"]):
        cum = g["tokens"].cumsum().to_numpy()
        first = int(g["step"].to_numpy()[np.argmax(cum >= 8000)])
        row = table[(table["policy"] == pol) & (table["seed"] == seed)].iloc[0]
        assert row["step_above"] == first and row["cost_above"] == cum[first - 1]
        small = raw[(raw["policy"] == pol) & (raw["seed"] == seed) & (raw["budget_value"] == 2000.0)]["step"]
        below = max([s for s in range(0, first, 2) if (cum[s - 1] if s else 0.0) < 8000]
                    + [s for s in small if s < first])
        assert row["step_below"] == below and row["cost_below"] == (cum[below - 1] if below else 0.0)
        assert frames.train[(frames.train["policy"] == pol) & (frames.train["seed"] == seed)]["step"].max() == first
    assert budget.frames_at(sim, "tokens", 2000)[1]["at"] == 2000.0
    with pytest.raises(UserError, match=r"^--at: got 1000000000.0, allowed: a tokens milestone every run reached"):
        budget.frames_at(sim, "tokens", 1e9)
    with pytest.raises(UserError, match=r"^--budget groups: no run of DIR was evaluated at a groups budget"):
        budget.frames_at(sim, "groups")


def test_ranking_lines_hold_or_change_only_by_the_seed_level_test():
    def cells(values):  # {(policy, seed): score}
        return pd.DataFrame([{"policy": p, "seed": s, "suite": "s", "task": "t", "score": v}
                             for (p, s), v in values.items()])
    steps = cells({("A", s): 0.5 + 0.01 * s for s in range(6)} | {("B", s): 0.4 for s in range(6)})
    # at equal cost B leads A on every seed by a margin far beyond the spread: a real change (p = 2/64)
    far = cells({("A", s): 0.3 + 0.01 * s for s in range(6)} | {("B", s): 0.6 for s in range(6)})
    rows = budget.ranking_rows(steps, far, 0.05)
    assert rows[["first", "second"]].values.tolist() == [["A", "B"]] and rows["p_seed"].iloc[0] == 2 / 64
    info = {"unit": "tokens", "at": 100.0, "largest": False, "tolerance": 0.05,
            "table": pd.DataFrame({"policy": ["A", "B"], "cost_read": 100.0, "cost_above": [120.0, 400.0],
                                   "rule": "interpolated"})}
    lines = budget.ranking_lines(steps, far, info)
    assert lines[0].startswith("budget report: every run at exactly tokens = 100; rule: interpolated linearly")
    assert lines[2].startswith("  B: cost read 100 (mean over 1 runs, largest 100); first evaluation past it at 400 "
                               "(up to 4.00x)")
    assert lines[-1] == ("  s: ranking at equal steps A > B; at equal tokens B > A: changes (A vs B: p_holm = 0.031, "
                         "seed-level sign-flip)")
    # the point order swaps, but by less than the seeds disagree: no detectable change (e_s = 0.35 on the
    # even seeds, -0.05 on the odd ones: |sum| >= 0.9 for the 2 x 8 patterns that keep the three 0.35 together)
    near = cells({("A", s): 0.4 + (0.2 if s % 2 else -0.2) + 0.01 * s for s in range(6)}
                 | {("B", s): 0.45 for s in range(6)})
    assert budget.ranking_lines(steps, near, info)[-1].endswith(
        "no detectable change (the point order differs, but no swapped pair passes the seed-level test: "
        "smallest p_holm = 0.250)")
    assert budget.ranking_lines(steps, steps, info)[-1].endswith(": holds")


def test_cli_budget_says_it_is_a_budget_report_everywhere(sim, capsys):
    rep = sim.parent / "rep"
    assert hb_main(["report", str(sim), "--baseline", "uniform", "--budget", "tokens", "--resamples", "50",
                    "--jobs", "1", "--out", str(rep)]) == 0
    out = capsys.readouterr().out
    lead, out = out.split("\n\n", 1)                     # one sentence per suite first, at the milestone
    assert " ".join(lead.split()).startswith("On heldout_harness (pass@1, 3 seeds, at tokens = 8000), ")
    assert " ".join(out.split()).startswith("Budget report, at equal cost: every run at exactly tokens = 8000 "
                                            "(the largest milestone every run reached), interpolated linearly in cost")
    assert "budget report: every run at exactly tokens = 8000" in out
    assert "  uniform: cost read 8,000 (mean over 3 runs, largest 8,000)" in out
    table = pd.read_csv(rep / "budget.csv")
    assert (table["cost_read"] == 8000.0).all() and len(table) == 6
    for page in ("index.html", "report.md"):
        text = (rep / page).read_text()
        assert "Budget report, at equal cost: every run at exactly tokens = 8000" in text
        assert "Equal cost: every run at tokens = 8000 (budget report)" in text
    assert hb_main(["report", str(sim), "--baseline", "uniform", "--cost-tolerance", "0.1", "--out", str(rep)]) == 2
    assert capsys.readouterr().err.strip() == "error: --cost-tolerance 0.1: only allowed with --budget " \
        "groups|tokens|seconds"


# ----------------------------------------------------------------------------- simulations

def _aa_block(rng, n_seeds=8, n_tasks=100, at=20000.0):
    """Raw eval + train tables of three designs whose success probability is one curve of the
    cost spent, f(c) = 0.2 + 0.5 (1 - exp(-c / 25000)), shifted by a run effect N(0, 0.05) on
    the logit: `A1`, `A2` at 400 tokens a step (evaluated every 15 steps), `B` at 12,800 +- 20%
    a step (every step), each with the evaluation at the crossing of ``at`` and a final one at
    step 60 (A) / 4 (B)."""
    ev: dict[str, list] = {k: [] for k in ("run_id", "policy", "seed", "step", "success", "tagged", "cost")}
    tr: dict[str, list] = {k: [] for k in ("run_id", "policy", "seed", "step", "tokens")}

    def f(c):
        return 0.2 + 0.5 * (1 - np.exp(-c / 25000.0))

    for pol, per_step, every, last in (("A1", 400.0, 15, 60), ("A2", 400.0, 15, 60), ("B", 12800.0, 1, 4)):
        for s in range(n_seeds):
            run = f"{pol}-{s}"
            cost = per_step * (rng.uniform(0.8, 1.2, last) if pol == "B" else np.ones(last))
            cum = np.concatenate([[0.0], np.cumsum(cost)])
            u = rng.normal(0, 0.05)
            cross = int(np.argmax(cum >= at))
            steps = sorted(set(range(0, last + 1, every)) | {last})
            for step in steps + [("budget", cross)]:
                tagged = isinstance(step, tuple)
                k = step[1] if tagged else step
                p = 1 / (1 + np.exp(-(np.log(f(cum[k]) / (1 - f(cum[k]))) + u)))
                for key, value in (("run_id", run), ("policy", pol), ("seed", s), ("step", k), ("tagged", tagged),
                                   ("cost", cum[k])):
                    ev[key].append(np.full(n_tasks, value))
                ev["success"].append(rng.random(n_tasks) < p)
            for key, value in (("run_id", run), ("policy", pol), ("seed", s)):
                tr[key].append(np.full(last, value))
            tr["step"].append(np.arange(1, last + 1))
            tr["tokens"].append(cost)
    # one frame of the columns the report reads (as many small frames, one per evaluation, built it)
    cols = {k: np.concatenate(v) for k, v in ev.items()}
    ok, tagged = cols.pop("success"), cols.pop("tagged")
    cost = cols.pop("cost")
    n = len(ok)
    raw = pd.DataFrame({**cols, "suite": "s", "task": np.tile(np.arange(n_tasks).astype(str), n // n_tasks),
                        "category": "c", "harness": "h", "attempt": 0, "success": ok, "reward": ok.astype(float),
                        "budget_unit": pd.Series(np.where(tagged, "tokens", None), dtype=object),
                        "budget_value": np.where(tagged, at, np.nan), "cost_reached": np.where(tagged, cost, np.nan)})
    return raw, pd.DataFrame({k: np.concatenate(v) for k, v in tr.items()})


@pytest.mark.calibration
def test_aa_at_equal_cost_with_unequal_step_costs_holds_its_level():
    """A1, A2 and B gain the same per token; B's steps cost 32x A's. Read at its first
    evaluation past 20,000 tokens, B overshoots by half a step on average (up to 1.5x the
    milestone) and 'beats' A1 far more often than alpha; interpolated at exactly 20,000 the
    sign-flip test over 8 seeds rejects at its level (what is left is the chord of a concave
    curve over one of B's steps, about 0.007 here against a standard error of delta of about
    0.026). The ranking check between equal steps and equal cost for the identical designs
    A1, A2 says 'changes' at most at its level, while their point order differs in about half
    the blocks. 100 blocks; Monte-Carlo sd of a rate p: sqrt(p (1 - p) / 100), 0.022 at 0.05."""
    rng = np.random.default_rng(20261202)
    blocks, interp, past, changes, swapped = 100, 0, 0, 0, 0
    for _ in range(blocks):
        raw, train = _aa_block(rng)
        upper, lower, table = budget.select(raw, train, "tokens", 20000.0)
        assert (table["cost_read"] == 20000.0).all()
        fr = load.make_frames(upper, train)
        mid = budget.cells_at(fr, {"lower": load.validate_eval(lower), "table": table}, (1,))
        up = budget.cell_metrics(fr.eval, (1,))
        for cells, name in ((mid, "interp"), (up, "past")):
            m = cells.groupby(["policy", "seed"])["score"].mean().unstack("seed")
            p = stats.sign_flip_test((m.loc["B"] - m.loc["A1"]).to_numpy(), resamples=1, rng=rng)
            if p < 0.05:
                interp, past = (interp + 1, past) if name == "interp" else (interp, past + 1)
        final = load.step_rows(raw)
        final = final[final["step"] == final.groupby("run_id")["step"].transform("max")]
        steps_cells = budget.cell_metrics(final, (1,))
        pair = lambda c: c[c["policy"].isin(["A1", "A2"])]  # noqa: E731
        rows = budget.ranking_rows(pair(steps_cells), pair(mid), 0.05, rng=rng)
        swapped += len(rows)
        changes += int((rows["p_holm"] < 0.05).any())
    mc = np.sqrt(0.05 * 0.95 / blocks)
    print(f"\nA/A at equal cost: interpolated {interp}/{blocks}, first evaluation past {past}/{blocks}; ranking of "
          f"identical designs: point order swapped {swapped}/{blocks}, 'changes' {changes}/{blocks} (MC sd {mc:.3f})")
    assert interp / blocks <= 0.05 + 2.5 * mc
    assert past / blocks >= 0.15                      # the old rule: B's overshoot reads as an effect (26/100)
    assert changes / blocks <= 0.05 + 2.5 * mc
    assert swapped / blocks >= 0.3                    # the point estimate alone would have said 'changes'


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    """The audit's case: fixed arms at 100 and 1,600 tokens per group, milestone 20,000 tokens, 8 seeds."""
    root = tmp_path_factory.mktemp("case")
    (root / "grid.toml").write_text(
        'name = "budget-case"\nsteps = 30\nseeds = 8\neval_every = 1\neval_budget = "tokens:20000"\n'
        '[env]\nkind = "bernoulli"\nn_harnesses = 2\ngroup_tokens = "100,1600"\n'
        '[[policies]]\nname = "fixed"\nlabel = "cheap"\narm = 0\n'
        '[[policies]]\nname = "fixed"\nlabel = "dear"\narm = 1\n')
    assert hb_main(["grid", "run", str(root / "grid.toml"), "--out", str(root / "out"), "--jobs", "1"]) == 0
    return root / "out"


def test_the_audit_case_gives_the_interpolated_answer(case, tmp_path):
    """The report's delta is the interpolation at exactly 20,000 tokens, recomputed here from the
    raw tables (every run evaluated after every step, the train table's cumulative tokens), not
    the reading at the first evaluation past it (the expensive arm's first step alone costs
    up to 3.84x the milestone)."""
    import reports

    frames, info = budget.frames_at(case, "tokens")
    res = reports.build_report(frames, "cheap", None, resamples=200, budget=info)
    raw = pd.concat([pd.read_parquet(p) for p in sorted(case.glob("cells/*/eval.parquet"))], ignore_index=True)
    tr = pd.concat([pd.read_parquet(p) for p in sorted(case.glob("cells/*/train.parquet"))], ignore_index=True)
    ordinary = raw[raw["budget_unit"].isna()]
    want, first_past = {}, {}
    for (pol, seed), g in tr.groupby(["policy", "seed"]):
        cum = np.concatenate([[0.0], g.sort_values("step")["tokens"].cumsum().to_numpy()])
        hi = int(np.argmax(cum >= 20000))
        w = (20000 - cum[hi - 1]) / (cum[hi] - cum[hi - 1])
        ev = raw[(raw["policy"] == pol) & (raw["seed"] == seed)]
        at_hi = ev[(ev["budget_value"] == 20000.0)]
        at_lo = ordinary[(ordinary["policy"] == pol) & (ordinary["seed"] == seed) & (ordinary["step"] == hi - 1)]
        for suite in ("heldout_tasks", "heldout_harness"):
            lo_v = at_lo[at_lo["suite"] == suite]["reward"].mean()
            hi_v = at_hi[at_hi["suite"] == suite]["reward"].mean()
            want[(pol, seed, suite)] = (1 - w) * lo_v + w * hi_v
            first_past[(pol, seed, suite)] = hi_v
    paired = res.tables["paired"].set_index(["suite", "metric"])
    assert (res.tables["budget"]["cost_read"] == 20000.0).all()
    assert res.tables["budget"].query("policy == 'dear'")["cost_above"].max() / 20000 > 2   # it did overshoot
    for suite in ("heldout_tasks", "heldout_harness"):
        d = np.mean([want[("dear", s, suite)] - want[("cheap", s, suite)] for s in range(8)])
        old = np.mean([first_past[("dear", s, suite)] - first_past[("cheap", s, suite)] for s in range(8)])
        got = paired.loc[(suite, "pass@1"), "delta"]
        assert got == pytest.approx(d, abs=1e-12) and abs(got - old) > 1e-3


def test_the_tuning_selection_is_on_the_page_and_in_report_md(tmp_path):
    import json

    import reports
    from reports_synth import make_synthetic

    ev, tr = make_synthetic({"base": 0.0, "hb": 0.5}, n_seeds=3)
    ev.to_parquet(tmp_path / "eval.parquet")
    tr.to_parquet(tmp_path / "train.parquet")
    (tmp_path / "tune.json").write_text(json.dumps({
        "seeds": [100, 101], "target": "validation", "test_seeds": [0, 1, 2], "knobs": {"policy.tau": [0.5, 1.0]},
        "designs": {"hb": {"setting": {"policy.tau": 0.5}, "score": 0.61234}, "base": {"setting": {}}}}))
    res = reports.build_report(tmp_path, "base", tmp_path / "rep", resamples=50)
    assert res.config["tuning"] == ["tuned on seeds [100, 101] by suite 'validation' (mean reward at the final step); "
                                    "tested on seeds [0, 1, 2]:", "  hb: policy.tau=0.5  (validation 0.6123)",
                                    "  base: (defaults)"]
    for page in ("index.html", "report.md"):
        text = (tmp_path / "rep" / page).read_text()
        assert "Tuned designs (DIR/tune.json)" in text and "  hb: policy.tau=0.5  (validation 0.6123)" in text


def test_the_share_of_gap_is_read_at_the_milestone():
    """budget.train_at: the train target's true success interpolated in cumulative cost between
    the two steps that bracket the milestone; gap.gap_table takes the scores and train rows it
    is handed (a budget report's) instead of the final evaluation and the last step."""
    from types import SimpleNamespace

    from reports.readings import references
    from reports import gap

    train = pd.DataFrame({"run_id": "r", "policy": "uniform", "seed": 0, "step": [1, 2, 3],
                          "tokens": [400.0, 400.0, 400.0], "alloc_h": 1, "true_h": [0.2, 0.4, 0.9]})
    at = budget.train_at(train, "tokens", 1000.0)          # cost 800 after step 2, 1200 after step 3: w = 1/2
    assert len(at) == 1 and at["step"].iloc[0] == 3 and at["true_h"].iloc[0] == pytest.approx(0.65)
    assert budget.train_at(train, "tokens", 400.0)["true_h"].iloc[0] == pytest.approx(0.2)   # exactly at step 1
    scores = pd.DataFrame([{"policy": p, "seed": s, "suite": "train", "score": v + 0.01 * s}   # the oracle aims at train
                           for p, v in (("uniform", 0.2), ("oracle", 0.6), ("harnessbandit", 0.4)) for s in range(4)])
    frames = SimpleNamespace(eval=None, train=None, runs={})
    got = gap.gap_table(frames, scores, None)
    want = references.share_of_gap(scores, references.runs_from_labels(scores["policy"]))
    pd.testing.assert_frame_equal(got, want)
    assert not got.empty
