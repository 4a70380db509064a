"""`hb twin fit` and `hb twin check` in process (issue 30): the scenario file it writes runs in
hb sim and loads like a shipped one, the figure beside it, the refusals (a file hb did not
write, bad flags), and the check's table and folder on a grid of hb sim runs standing in for
real runs."""
from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from ablations import twin_check
from hbsim import scenarios
from hbsim.cli import main
from hbsim.contract import KIND_FILE

pytestmark = pytest.mark.cli


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    """Uniform runs of the trap scenario with probes (the fit's logs) and a 'real' folder of
    five policies x 2 other seeds, 40 steps each."""
    root = tmp_path_factory.mktemp("twin")
    assert main(["sim", "--scenario", "trap", "--policy", "uniform", "--seeds", "2", "--steps", "40",
                 "--counterfactual", "10", "--eval-every", "10", "--out", str(root / "fitlogs"), "--jobs", "1"]) == 0
    assert main(["sim", "--scenario", "trap", "--policy", "uniform", "--policy", "round_robin", "--policy", "transfer",
                 "--policy", "learnability", "--policy", "oracle", "--set", "policy.target=heldout_tasks",
                 "--seeds", "2", "--seed-offset", "5", "--steps", "40", "--out", str(root / "real"), "--jobs", "1"]) == 0
    return root


def test_fit_writes_a_scenario_file_that_runs(logs, capsys):
    out = logs / "my_twin.toml"
    assert main(["twin", "fit", str(logs / "fitlogs"), "--out", str(out), "--holdout", "0.25"]) == 0
    printed = capsys.readouterr().out
    assert "fit quality on held-out steps" in printed and "what-if change (train)" in printed
    assert "read (se)" in printed and re.search(r"  trap +ordinary  .* [+-]\d\.\d\d \(\d+\.\d\d\) ", printed)
    assert "transfer matrix" in printed and "tasks per step" in printed
    text = out.read_text()
    assert text.startswith("# written by hb twin fit") and (logs / "my_twin.png").stat().st_size > 1000
    sc = scenarios.load(out)
    assert sc.name == "my_twin" and sc.env["kind"] == "twin" and sc.steps == 40 and sc.seeds == 2
    assert sc.env["harness_names"] == "ordinary1,ordinary2,ordinary3,ordinary4,trap"
    assert "true_" not in text.split("[env]")[1]
    assert main(["sim", "--scenario", str(out), "--policy", "uniform", "--seeds", "2", "--steps", "5", "--jobs", "1"]) == 0
    assert "uniform" in capsys.readouterr().out
    assert main(["stress", "--quick", "--scenarios", str(out), "--policies", "transfer", "--seeds", "2", "--out",
                 str(logs / "stress"), "--jobs", "1"]) == 0              # a first look: the shipped axis
    assert "my_twin" in capsys.readouterr().out
    # hb wrote it: a rerun replaces it; a file hb did not write is refused unless --force
    assert main(["twin", "fit", str(logs / "fitlogs"), "--out", str(out), "--holdout", "0"]) == 0
    foreign = logs / "foreign.toml"
    foreign.write_text("name = 'mine'\n")
    assert main(["twin", "fit", str(logs / "fitlogs"), "--out", str(foreign)]) == 2
    assert foreign.read_text() == "name = 'mine'\n"
    assert "exists and was not written by hb twin fit" in capsys.readouterr().err
    assert main(["twin", "fit", str(logs / "fitlogs"), "--out", str(foreign), "--holdout", "0", "--force"]) == 0
    assert foreign.read_text().startswith("# written by hb twin fit")
    assert main(["twin", "fit", str(logs / "fitlogs"), "--out", str(logs / "new" / "deep" / "t.toml"), "--holdout",
                 "0"]) == 0                                      # its folder is created (after the fit)
    assert (logs / "new" / "deep" / "t.png").is_file()


@pytest.mark.parametrize("argv, message", [
    (["--out", "x.txt"], "expected the path of a .toml file"),
    (["--out", "TWIN.toml", "--holdout", "0.95"], "--holdout=0.95"),
    (["--out", "TWIN.toml", "--target", "nope"], "--target 'nope' is not allowed"),
])
def test_fit_refuses_bad_flags(logs, capsys, argv, message):
    assert main(["twin", "fit", str(logs / "fitlogs"), *argv]) == 2
    assert message in capsys.readouterr().err


def test_fit_refuses_a_folder_without_runs(tmp_path, capsys):
    assert main(["twin", "fit", str(tmp_path), "--out", str(tmp_path / "t.toml")]) == 2
    assert "holds no complete run" in capsys.readouterr().err


def test_check_prints_the_agreement_and_writes_its_folder(logs, capsys):
    twin_file = logs / "check_twin.toml"
    assert main(["twin", "fit", str(logs / "fitlogs"), "--out", str(twin_file), "--holdout", "0"]) == 0
    capsys.readouterr()
    out = logs / "check"
    assert main(["twin", "check", "--twin", str(twin_file), "--real", str(logs / "real"), "--out", str(out),
                 "--resamples", "200", "--jobs", "1"]) == 0
    printed = capsys.readouterr().out
    assert "Kendall tau" in printed and "bernoulli (default)" in printed and "twin: check_twin" in printed
    record = json.loads((out / "check.json").read_text())
    assert set(record["worlds"]) == {"twin", "closest", "bernoulli"} and record["closest"] == "trap"
    for row in record["worlds"].values():
        assert row["policies"] == 4 and row["seeds"] == 2            # the oracle is not ranked
        assert -1 <= row["tau"] <= 1 and row["tau_lo"] <= row["tau_hi"] and row["top1_regret"] >= 0
        # round_robin, transfer, learnability where the reference's gap is significant (at 2 seeds it
        # may not be: then share_of_gap gives no share, Fieller's interval being unbounded)
        assert row["share_policies"] in (0, 3)
    # how many real seeds the figure rests on, what chance and "always uniform" give
    assert record["real_runs"] == 8 and record["real_seeds"] == {"min": 2, "max": 2}
    assert record["chance_tau95"] == pytest.approx(twin_check.chance_tau(4))
    real = pd.concat([r["scores"] for r in twin_check.real_runs(str(logs / "real"))])
    means = real[real["suite"] == "heldout_tasks"].groupby("policy")["score"].mean().drop("oracle", errors="ignore")
    assert record["always_uniform"]["top1_regret"] == pytest.approx(means.max() - means["uniform"])
    assert "the figures rest on 8 real runs: 2 seeds per ranked policy" in printed
    assert f"always pick uniform (no world): top-1 regret {means.max() - means['uniform']:.4f}" in printed
    assert json.loads((out / KIND_FILE).read_text())["kind"] == "twin_check"
    assert (out / "check.md").read_text().startswith("# hb twin check")
    assert main(["twin", "check", "--twin", str(twin_file), "--real", str(logs / "real"), "--suite", "nope",
                 "--jobs", "1"]) == 2
    assert "--suite 'nope' is not in the real runs' evaluations" in capsys.readouterr().err
    # one policy (the fit's own uniform runs) is nothing to rank
    assert main(["twin", "check", "--twin", str(twin_file), "--real", str(logs / "fitlogs"), "--jobs", "1"]) == 2
    assert capsys.readouterr().err.strip().endswith("policies run on the same seeds: 1 (uniform); expected at "
                                                    "least 2 to rank")


def test_only_policies_on_every_seed_are_ranked():
    """Fixed arms on seeds 0-1 beside designs on 0-2 (the SmolLM2 grid): the designs are ranked on
    their 3 seeds (the largest set 3 policies share), the others named with their seed counts; a
    policy with an extra seed is ranked on the common ones."""
    rows = [("uniform", s) for s in (0, 1, 2)] + [("hb", s) for s in (0, 1, 2)] + [("arm", s) for s in (0, 1)] \
        + [("gap", s) for s in (0, 2)] + [("more", s) for s in (0, 1, 2, 3)]
    real = pd.DataFrame(rows, columns=["policy", "seed"]).assign(score=0.5)
    assert twin_check.complete_labels(real, ["uniform", "hb", "arm", "gap", "more"]) == (
        ["uniform", "hb", "more"], {"arm": 2, "gap": 2}, [0, 1, 2])
    # two designs only: both ranked on the seeds they share
    assert twin_check.complete_labels(real, ["uniform", "more"]) == (["uniform", "more"], {}, [0, 1, 2])
    # three policies on seeds 0-1 (arm, uniform, hb) and only uniform and hb on 0-2: 0-1 it is
    assert twin_check.complete_labels(real, ["uniform", "hb", "arm"]) == (["uniform", "hb", "arm"], {}, [0, 1])


def test_chance_tau_is_the_permutation_quantile():
    """3 policies: the 6 orders give tau -1, -1/3, -1/3, 1/3, 1/3, 1; the 95th percentile (a value
    tau takes: the higher neighbour) is 1, the median 1/3; 7 policies: 5040 orders, 0.52."""
    assert twin_check.chance_tau(3) == pytest.approx(1.0)
    assert twin_check.chance_tau(3, 0.5) == pytest.approx(1 / 3)
    assert twin_check.chance_tau(7) == pytest.approx(11 / 21)


def test_run_folders_of_every_layout(logs, tmp_path):
    """A run directory, an hb sim folder (<label>/seed<s>/) and a grid directory (cells/<id>/):
    their complete runs; hidden temporaries and incomplete runs are not."""
    import shutil

    from ablations.twin_check import run_dirs

    sim = sorted(run_dirs(logs / "real"))
    assert len(sim) == 10 and run_dirs(sim[0]) == [sim[0]]
    grid = tmp_path / "grid"
    for i, d in enumerate(sim[:3]):
        shutil.copytree(d, grid / "cells" / f"cell{i}")
    shutil.copytree(sim[3], grid / "cells" / ".tmp-cell3")
    (grid / "cells" / "cell4").mkdir()                        # incomplete: no run.json
    assert [p.name for p in run_dirs(grid)] == ["cell0", "cell1", "cell2"]
