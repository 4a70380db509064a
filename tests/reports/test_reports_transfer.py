"""reports.transfer: the transfer matrix of fixed-arm runs, on hand-built run folders."""
import json

import pandas as pd
import pytest

from reports.transfer import main, markdown, transfer_table

pytestmark = pytest.mark.unit


def write_run(folder, label, seed, success):
    """success: {(step, harness): [per task]}"""
    folder.mkdir(parents=True)
    policy = {"name": "fixed", "label": label, "arm": 0} if label.startswith("fixed") else {"name": label, "label": label}
    (folder / "run.json").write_text(json.dumps({"label": label, "seed": seed, "config": {"policy": policy}}))
    rows = [{"step": step, "suite": "heldout_harness" if h == "hash" else "heldout_tasks", "task": f"t{i}",
             "category": "easy", "harness": h, "attempt": 0, "reward": float(v), "success": bool(v)}
            for (step, h), values in success.items() for i, v in enumerate(values)]
    pd.DataFrame(rows).to_parquet(folder / "eval.parquet")


def test_paired_change_per_trained_and_evaluated_harness(tmp_path, capsys):
    write_run(tmp_path / "a", "fixed-json", 0, {(0, "json"): [0, 0, 1, 0], (30, "json"): [1, 1, 1, 0],
                                               (0, "hash"): [0, 1, 0, 0], (30, "hash"): [0, 1, 0, 0]})
    write_run(tmp_path / "b", "fixed-json", 1, {(0, "json"): [0, 0, 0, 0], (30, "json"): [1, 0, 1, 1],
                                               (0, "hash"): [0, 0, 0, 0], (30, "hash"): [1, 0, 0, 0]})
    write_run(tmp_path / "c", "fixed-xml", 0, {(0, "json"): [0, 0, 0, 0], (10, "json"): [1, 1, 1, 1]})  # no step 30
    write_run(tmp_path / "d", "uniform", 0, {(0, "json"): [0, 0, 0, 0], (30, "json"): [1, 1, 1, 1]})    # not fixed
    table, skipped = transfer_table(tmp_path, 0, 30)
    assert skipped == 1 and set(table["trained"]) == {"json"}
    js = table.set_index("evaluated").loc["json"]
    # paired differences: seed 0: 1,1,0,0; seed 1: 1,0,1,1 -> mean 5/8; sd of the 8 values, t(7)
    assert js["change"] == pytest.approx(5 / 8) and js["n"] == 8 and js["seeds"] == "0,1"
    d = pd.Series([1, 1, 0, 0, 1, 0, 1, 1], dtype=float)
    half = 2.3646242510102993 * d.std(ddof=1) / 8 ** 0.5
    assert (js["low"], js["high"]) == (pytest.approx(5 / 8 - half), pytest.approx(5 / 8 + half))
    assert (js["before"], js["after"]) == (pytest.approx(0.125), pytest.approx(0.75))
    assert table.set_index("evaluated").loc["hash", "change"] == pytest.approx(1 / 8)
    text = markdown(table)
    assert text.splitlines()[0] == "| trained \\ evaluated | json | hash |"
    assert "| json (seeds 0,1) | +0.62 [" in text
    assert main([str(tmp_path)]) == 0 and "1 fixed-arm run(s) had not reached both steps" in capsys.readouterr().out


def test_bad_input_is_one_line_exit_2(tmp_path, capsys):
    assert main([str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert "is not a folder" in err and len(err.strip().splitlines()) == 1
    (tmp_path / "x.csv").write_text("keep\n")
    assert main([str(tmp_path), "--csv", str(tmp_path / "x.csv")]) == 2
    assert (tmp_path / "x.csv").read_text() == "keep\n"
