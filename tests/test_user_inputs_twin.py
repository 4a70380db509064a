"""Issue 41: the twin, the TOML files, the run tables read back and unfinished grids keep the
promises of tests/test_user_inputs.py -- one table, every case of causes 1-4, 6, 7 and 10.

Each row of CASES is (id, builder, needle): the builder gets a `World` (the fit's logs, a
"real" folder of two policies, a fitted twin, made once per module and copied for the row)
and returns the `hb` arguments and the folder that must stay unchanged. The row runs `hb` in
this process and asserts exit 2, one line on stderr naming the problem (the needle), no
traceback, and the same hash of that folder (every path, mode and content) before and after.
The behaviours that are not refusals follow the table (progress, a twin check of other
harnesses, collect and report of a killed grid). The kill -9 rows of `hb twin fit` are in
tests/test_fault_injection_twin.py; the policy doors in tests/test_user_inputs_plugins.py.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

from ablations_testkit import grid_text
from hbsim import contract
from hbsim.contract import folders, tomlfile
from user_inputs_kit import REPO, hb, tree_hash  # noqa: F401 (hb: a fixture)

pytestmark = pytest.mark.cli

SIM = ["sim", "--scenario", "trap", "--seeds", "2", "--steps", "12", "--jobs", "1"]
TINY_GRID = grid_text(name="tiny", steps=3, seeds=2, policies=[{"name": "uniform"}, {"name": "round_robin"}])


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    """fitlogs/ (uniform on trap, 2 seeds x 12 steps, probes every 4th), real/ (uniform and
    round_robin, 2 other seeds), twin.toml fitted to fitlogs, a tiny grid and its grid file."""
    from hbsim.cli import main
    root = tmp_path_factory.mktemp("twin-inputs")
    assert main([*SIM, "--policy", "uniform", "--counterfactual", "4", "--eval-every", "4",
                 "--out", str(root / "fitlogs")]) == 0
    assert main([*SIM, "--policy", "uniform", "--policy", "round_robin", "--seed-offset", "5",
                 "--out", str(root / "real")]) == 0
    assert main(["twin", "fit", str(root / "fitlogs"), "--out", str(root / "twin.toml"), "--holdout", "0"]) == 0
    (root / "tiny.toml").write_text(TINY_GRID)
    assert main(["grid", "run", str(root / "tiny.toml"), "--out", str(root / "grid"), "--jobs", "1"]) == 0
    return root


class World:
    """Copies of the module's folders for one row, and the broken files the rows need."""

    def __init__(self, base: Path, tmp: Path):
        self.base, self.tmp = base, tmp

    def copy(self, name: str) -> Path:
        path = self.tmp / name
        if not path.exists():
            (shutil.copytree if (self.base / name).is_dir() else shutil.copy)(self.base / name, path)
        return path

    def logs(self) -> Path:
        return self.copy("fitlogs")

    def run(self) -> Path:
        """The first run directory of the fit's logs (a copy)."""
        return self.logs() / "uniform" / "seed0"

    def table(self, name: str, change) -> Path:
        """The logs with `change(frame)` applied to the first run's table `name` (returns the logs)."""
        path = self.run() / name
        frame = pd.read_parquet(path)
        frame = change(frame)
        frame.to_parquet(path, index=False)
        return self.logs()

    def garbage(self, name: str) -> Path:
        (self.run() / name).write_text("not parquet")
        return self.logs()

    def twin(self) -> Path:
        return self.copy("twin.toml")

    def real(self) -> Path:
        return self.copy("real")

    def file(self) -> Path:
        path = self.tmp / "a-file"
        path.write_text("not a folder\n")
        return path

    def text(self, name: str, content: str) -> Path:
        path = self.tmp / name
        path.write_text(content)
        return path

    def pipe(self, name: str) -> Path:
        path = self.tmp / name
        os.mkfifo(path)
        return path

    def link(self, name: str, target: str) -> Path:
        path = self.tmp / name
        path.symlink_to(target)
        return path

    def deep(self, name: str, levels: int = 3000) -> Path:
        return self.text(name, "x = " + "[" * levels + "]" * levels + "\n")

    def grid(self) -> Path:
        return self.copy("grid")

    def cells(self) -> Path:
        return self.grid() / contract.CELLS / sorted(os.listdir(self.grid() / contract.CELLS))[0]

    def real_json(self, change) -> Path:
        """real/ with `change(record)` applied to its first run's run.json."""
        path = self.real() / "round_robin" / "seed5" / contract.RUN_JSON
        record = json.loads(path.read_text())
        change(record)
        path.write_text(json.dumps(record))
        return self.real()


def _set(frame: pd.DataFrame, column: str, row: int, value) -> pd.DataFrame:
    frame = frame.astype({column: "float64"}) if isinstance(value, float) else frame
    frame.loc[row, column] = value
    return frame


def _fixed_arm(record: dict) -> None:
    record["config"]["policy"] = {"name": "fixed", "label": "round_robin", "arm": 9}


FIT = ["twin", "fit"]
# (id, w -> (argv, folder that must stay unchanged), needle)
CASES = [
    # cause 1: the fit's logs are read through the one schema-checked reader
    ("fit-corrupt-train", lambda w: ([*FIT, w.garbage("train.parquet"), "--out", w.tmp / "t.toml"], w.tmp),
     "train.parquet' is missing or not a readable parquet table"),
    ("fit-corrupt-groups", lambda w: ([*FIT, w.garbage("groups.parquet"), "--out", w.tmp / "t.toml"], w.tmp),
     "groups.parquet' is missing or not a readable parquet table"),
    ("fit-train-without-step", lambda w: ([*FIT, w.table("train.parquet", lambda f: f.drop(columns="step")), "--out",
                                          w.tmp / "t.toml"], w.tmp), "column 'step' is missing"),
    ("fit-groups-without-success", lambda w: ([*FIT, w.table("groups.parquet", lambda f: f.drop(columns="success")),
                                              "--out", w.tmp / "t.toml"], w.tmp), "column 'success' is missing"),
    ("fit-train-without-alloc", lambda w: ([*FIT, w.table("train.parquet", lambda f: f[[c for c in f.columns
                                                                                       if not c.startswith("alloc_")]]),
                                           "--out", w.tmp / "t.toml"], w.tmp), "column 'alloc_<harness>' is missing"),
    ("fit-nan-step", lambda w: ([*FIT, w.table("train.parquet", lambda f: _set(f, "step", 3, float("nan"))), "--out",
                                w.tmp / "t.toml"], w.tmp), "column 'step' holds nan (row 3); allowed: whole numbers"),
    ("fit-negative-group-step", lambda w: ([*FIT, w.table("groups.parquet", lambda f: _set(f, "step", 0, -3)), "--out",
                                           w.tmp / "t.toml"], w.tmp),
     "column 'step' holds -3 (row 0); allowed: whole numbers in [1, 1000000]"),
    ("fit-huge-step", lambda w: ([*FIT, w.table("train.parquet", lambda f: _set(f, "step", 11, 10**9)), "--out",
                                 w.tmp / "t.toml"], w.tmp), "column 'step' holds 1000000000"),
    ("fit-eval-step-beyond-train", lambda w: ([*FIT, w.table("eval.parquet", lambda f: _set(f, "step", 0, 50)),
                                              "--out", w.tmp / "t.toml"], w.tmp), "whole numbers in [0, 12]"),
    ("fit-nan-group-success", lambda w: ([*FIT, w.table("groups.parquet", lambda f: _set(f, "success", 2,
                                                                                         float("nan"))),
                                         "--out", w.tmp / "t.toml"], w.tmp),
     "column 'success' holds nan (row 2); allowed: finite numbers in [0, 1]"),
    ("fit-group-harness-not-trained", lambda w: ([*FIT, w.table("groups.parquet", lambda f: _set(f, "harness", 0,
                                                                                                "ghost")),
                                                 "--out", w.tmp / "t.toml"], w.tmp),
     "column 'harness' names 'ghost', which train.parquet lacks"),
    ("fit-arm-beyond-harnesses", lambda w: ([*FIT, w.table("train.parquet", lambda f: _set(f, "arm", 0, 7)), "--out",
                                            w.tmp / "t.toml"], w.tmp), "column 'arm' holds 7"),
    ("fit-duplicate-train-step", lambda w: ([*FIT, w.table("train.parquet", lambda f: _set(f, "step", 3, 1)), "--out",
                                            w.tmp / "t.toml"], w.tmp),
     "column 'step' holds 1 twice (rows 0 and 3); allowed: one row per step"),
    ("fit-group-retained-not-a-flag", lambda w: ([*FIT, w.table("groups.parquet", lambda f: _set(
        f.astype({"retained": "int64"}), "retained", 0, 7)), "--out", w.tmp / "t.toml"], w.tmp),
     "column 'retained' holds 7 (row 0); allowed: true or false"),
    ("fit-probe-change-beyond-1", lambda w: ([*FIT, w.table("counterfactual.parquet", lambda f: _set(
        f, "real_train", 0, 5.0)), "--out", w.tmp / "t.toml"], w.tmp),
     "column 'real_train' holds 5.0 (row 0); allowed: finite numbers in [-1, 1] or NaN"),
    ("fit-nan-retained-count", lambda w: ([*FIT, w.table("train.parquet", lambda f: _set(f, "groups_retained", 2,
                                                                                         float("nan"))),
                                          "--out", w.tmp / "t.toml"], w.tmp),
     "column 'groups_retained' holds nan (row 2); allowed: finite numbers >= 0"),
    ("fit-retained-beyond-generated", lambda w: ([*FIT, w.table("train.parquet", lambda f: f.assign(
        groups_retained=f["groups_generated"] + 1)), "--out", w.tmp / "t.toml"], w.tmp),
     "more than that step's groups_generated"),
    ("fit-eval-harness-not-trained", lambda w: ([*FIT, w.table("eval.parquet", lambda f: _set(
        f, "harness", int(f.index[f["suite"] == "heldout_tasks"][0]), "ghost")), "--out", w.tmp / "t.toml"], w.tmp),
     "eval.parquet': column 'harness' names 'ghost', which train.parquet lacks"),
    ("fit-suite-bogus", lambda w: ([*FIT, w.logs(), "--suite", "bogus", "--out", w.tmp / "t.toml"], w.tmp),
     "--suite 'bogus' is not in the runs' evaluations"),
    ("sim-reuse-corrupt-eval", lambda w: ([*SIM, "--policy", "uniform", "--counterfactual", "4", "--eval-every", "4",
                                          "--out", w.garbage("eval.parquet")], w.logs()),
     "eval.parquet' is missing or not a readable parquet table"),
    ("sim-reuse-nan-step", lambda w: ([*SIM, "--policy", "uniform", "--counterfactual", "4", "--eval-every", "4",
                                      "--out", w.table("train.parquet", lambda f: _set(f, "step", 0, float("nan")))],
                                     w.logs()), "column 'step' holds nan"),
    ("sim-reuse-duplicate-step", lambda w: ([*SIM, "--policy", "uniform", "--counterfactual", "4", "--eval-every", "4",
                                            "--out", w.table("train.parquet", lambda f: _set(f, "step", 5, 1))],
                                           w.logs()), "column 'step' holds 1 twice (rows 0 and 5)"),
    # cause 2: the twin's files under the folder rules
    ("fit-out-dangling-link", lambda w: ([*FIT, w.logs(), "--out", w.link("t.toml", "nowhere.toml")], w.tmp),
     "is a symbolic link"),
    ("fit-out-under-a-file", lambda w: ([*FIT, w.logs(), "--out", w.text("g.toml", "x = 1\n") / "t.toml"], w.tmp),
     "g.toml/t.toml' lies under"),
    ("fit-out-in-run-dir", lambda w: ([*FIT, w.logs(), "--out", w.run() / "t.toml"], w.tmp),
     "which is a run directory"),
    ("fit-out-in-cells", lambda w: ([*FIT, w.logs(), "--out", w.cells() / "t.toml"], w.tmp),
     "the cells of a grid directory"),
    ("fit-out-user-figure", lambda w: ([*FIT, w.logs(), "--out", w.twin()], w.text("twin.png", "my figure") and w.tmp),
     "twin.png' exists and was not written by hb twin fit"),
    ("fit-out-user-toml", lambda w: ([*FIT, w.logs(), "--out", w.text("mine.toml", "name = 'mine'\n")], w.tmp),
     "mine.toml' exists and was not written by hb twin fit"),
    ("fit-out-folder", lambda w: ([*FIT, w.logs(), "--out", w.logs().parent / "x.toml"],
                                  (w.tmp / "x.toml").mkdir() or w.tmp), "is a folder"),
    ("fit-out-named-pipe", lambda w: ([*FIT, w.logs(), "--out", w.pipe("p.toml")], w.tmp), "is not a regular file"),
    # cause 3: the fit's size, bounded before the fit
    ("fit-too-large", lambda w: ([*FIT, w.table("train.parquet", lambda f: _set(f, "step", 11, 999_999)), "--out",
                                 w.tmp / "t.toml"], w.tmp), "too large a fit; allowed: at most 2,000,000"),
    # cause 4: the one TOML reader, bounded
    ("scenario-named-pipe", lambda w: ([*SIM, "--scenario", w.pipe("p.toml")], w.tmp), "is not a regular file"),
    ("scenario-link-to-dev-zero", lambda w: ([*SIM, "--scenario", w.link("z.toml", "/dev/zero")], w.tmp),
     "is not a regular file"),
    ("scenario-deep-nesting", lambda w: ([*SIM, "--scenario", w.deep("d.toml")], w.tmp),
     "nests tables or arrays more than 32 levels deep"),
    ("scenario-deep-headers", lambda w: ([*SIM, "--scenario", w.text("h.toml", "[" + ".".join(["a"] * 60) + "]\n")],
                                         w.tmp), "nests tables or arrays more than 32 levels deep"),
    ("scenario-too-large", lambda w: ([*SIM, "--scenario", w.text("big.toml", "# " + "x" * 1_000_001 + "\n")], w.tmp),
     "is larger than 1,000,000 bytes"),
    ("grid-deep-nesting", lambda w: (["grid", "run", w.deep("g.toml"), "--out", w.tmp / "g"], w.tmp),
     "the grid file nests tables or arrays more than 32 levels deep"),
    ("grid-named-pipe", lambda w: (["grid", "plan", w.pipe("g.toml")], w.tmp), "is not a regular file"),
    ("study-deep-nesting", lambda w: (["validity", w.tmp / "st", "--study", w.deep("s.toml")], w.tmp),
     "the study file nests tables or arrays more than 32 levels deep"),
    ("stress-scenario-pipe", lambda w: (["stress", "--scenarios", w.pipe("p.toml"), "--out", w.tmp / "s"], w.tmp),
     "is not a regular file"),
    ("twin-check-deep-twin", lambda w: (["twin", "check", "--twin", w.deep("t.toml"), "--real", w.real()], w.tmp),
     "nests tables or arrays more than 32 levels deep"),
    # cause 6: hb twin check trusts the real runs only as far as they go
    ("check-runs-of-other-harnesses", lambda w: (["twin", "check", "--twin", w.twin(), "--real", w.grid()], w.tmp),
     "but the twin"),
    ("check-unknown-policy", lambda w: (["twin", "check", "--twin", w.twin(), "--real",
                                         w.real_json(lambda r: r["config"]["policy"].update(name="greedy_l"))], w.tmp),
     "policy 'greedy_l' is not registered in this hb"),
    ("check-fixed-arm-beyond-twin", lambda w: (["twin", "check", "--twin", w.twin(), "--real",
                                                w.real_json(_fixed_arm)], w.tmp),
     "run.json': its policy 'round_robin' cannot run in the twin"),
    ("check-corrupt-eval", lambda w: (["twin", "check", "--twin", w.twin(), "--real", w.real()],
                                      (w.real() / "uniform" / "seed5" / "eval.parquet").write_text("x") and w.tmp),
     "eval.parquet' is missing or not a readable parquet table"),
    # cause 10: small message gaps
    ("fit-logs-a-file", lambda w: ([*FIT, w.file(), "--out", w.tmp / "t.toml"], w.tmp), "is a file, expected a folder"),
    ("fit-logs-a-pipe", lambda w: ([*FIT, w.pipe("p"), "--out", w.tmp / "t.toml"], w.tmp),
     "is a named pipe, a device or a socket, expected a folder"),
    ("check-real-a-file", lambda w: (["twin", "check", "--twin", w.twin(), "--real", w.file()], w.tmp),
     "is a file, expected a folder"),
    ("real-probe-tasks-without-counterfactual",
     lambda w: (["real", "--preset", "tiny", "--policy", "uniform", "--steps", "1", "--device", "cpu", "--set",
                 "env.probe_tasks=3", "--out", w.tmp / "r"], w.tmp),
     "--set env.probe_tasks=3 is not allowed without --counterfactual K"),
    ("real-probe-attempts-without-counterfactual",
     lambda w: (["real", "--preset", "tiny", "--policy", "uniform", "--steps", "1", "--device", "cpu", "--set",
                 "env.probe_attempts=2", "--out", w.tmp / "r"], w.tmp),
     "--set env.probe_attempts=2 is not allowed without --counterfactual K"),
    ("report-part-never-collected", lambda w: (["report", w.grid(), "--baseline", "uniform", "--part", "a"], w.tmp),
     "is a grid whose tables were never collected"),
]


@pytest.mark.parametrize("builder, needle", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_refused_with_one_line_and_nothing_changed(base, tmp_path, hb, builder, needle):
    world = World(base, tmp_path)
    argv, keep = builder(world)
    before = tree_hash(keep)
    code, _, err = hb(*argv)
    assert code == 2, err[-3000:]
    assert err.startswith("error: ") and err.count("\n") == 1, err[-3000:]
    assert needle in err and "Traceback" not in err, err
    assert tree_hash(keep) == before


# -- what is not a refusal -----------------------------------------------------------------
def test_fit_shows_progress_and_marks_both_files(base, tmp_path, hb, monkeypatch):
    from ablations import twin_cli
    monkeypatch.setattr(twin_cli.Heartbeat, "__init__", _fast_heartbeat(twin_cli.Heartbeat.__init__))
    code, _, err = hb("twin", "fit", base / "fitlogs", "--out", tmp_path / "t.toml", "--holdout", "0")
    assert code == 0, err[-3000:]
    assert "hb twin fit: fitting 2 runs x 12 steps x 5 harnesses ..." in err and "s so far" in err
    assert twin_cli._ours_toml(tmp_path / "t.toml") and twin_cli._ours_png(tmp_path / "t.png")
    # a leftover temporary of a killed fit is removed; the user's own files beside it stay
    (tmp_path / ".tmp-t.toml-999999-abcd.toml").write_text("half")
    (tmp_path / "notes.txt").write_text("mine")
    assert hb("twin", "fit", base / "fitlogs", "--out", tmp_path / "t.toml", "--holdout", "0")[0] == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "t.png", "t.toml"]


def _fast_heartbeat(init):
    def fast(self, what, every=10.0):
        init(self, what, every=0.05)
    return fast


def test_fit_refuses_a_user_figure_but_force_replaces_it(base, tmp_path, hb):
    (tmp_path / "twin.png").write_bytes(b"\x89PNG my own")
    code, _, err = hb("twin", "fit", base / "fitlogs", "--out", tmp_path / "twin.toml", "--holdout", "0")
    assert code == 2 and "twin.png' exists and was not written by hb twin fit" in err
    assert (tmp_path / "twin.png").read_bytes() == b"\x89PNG my own" and not (tmp_path / "twin.toml").exists()
    assert hb("twin", "fit", base / "fitlogs", "--out", tmp_path / "twin.toml", "--holdout", "0", "--force")[0] == 0


def test_check_prints_no_raw_warnings(base, tmp_path, hb):
    code, out, err = hb("twin", "check", "--twin", base / "twin.toml", "--real", base / "real", "--resamples", "20",
                        "--jobs", "1")
    assert code == 0, err[-3000:]
    assert "Warning" not in err and "rank agreement" in out


def test_toml_reader_limits():
    assert tomlfile.MAX_TOML_BYTES == 1_000_000 and tomlfile.MAX_TOML_DEPTH == 32
    assert tomlfile._depth({"a": {"b": [1, [2]]}}) == 4 and tomlfile._depth({}) == 1


def test_scenario_file_with_a_comma_is_one_file(tmp_path, hb):
    from ablations.stress import _split_paths
    text = (REPO / "examples" / "my_scenario.toml").read_text()
    path = tmp_path / "my,scen.toml"
    path.write_text(text)
    assert _split_paths(f"trap,{path},dead") == ["trap", str(path), "dead"]
    code, _, err = hb("stress", "--scenarios", f"trap,{path}", "--quick", "--out", tmp_path / "s")
    assert code == 2 and f"{path}: key 'name'" in err and "'my,scen'" in err       # the whole name, not a fragment


def _killed_grid(base: Path, tmp_path: Path) -> Path:
    """The tiny grid as `hb grid run` leaves it when killed after two of its four cells."""
    grid = tmp_path / "grid"
    shutil.copytree(base / "grid", grid)
    cells = sorted(p for p in (grid / contract.CELLS).iterdir())
    for cell in cells[2:]:
        shutil.rmtree(cell)
    record = json.loads((grid / contract.KIND_FILE).read_text())
    record.update(state="incomplete", files=[])
    (grid / contract.KIND_FILE).write_text(json.dumps(record))
    return grid


def test_collect_of_a_killed_grid_stays_incomplete_and_lists_its_cells(base, tmp_path, hb):
    grid = _killed_grid(base, tmp_path)
    code, _, err = hb("grid", "collect", grid)
    assert code == 0, err
    assert "is unfinished: 2 planned cell(s) have no result" in err
    record = folders.read_marker(grid)
    cells = sorted(f"cells/{p.name}" for p in (grid / contract.CELLS).iterdir())
    assert record["state"] == "incomplete"
    assert record["files"] == sorted([*cells, "eval.parquet", "grid.json", "train.parquet"])
    missing = [c for c in json.loads((base / "grid" / "grid.json").read_text())["planned"]
               if not (grid / "cells" / c[0]).exists()]
    assert len(missing) == 2
    code, _, err = hb("report", grid, "--baseline", "uniform", "--resamples", "20", "--k", "1")
    assert code == 0 and "is unfinished: 2 planned cell(s) have no result: " in err
    assert f"{missing[0][1]} seed {missing[0][2]} ({missing[0][0]})" in err
    assert "this report covers only the finished cells" in err
    # a grid recorded before grid.json kept its plan: the marker says it is unfinished
    record = json.loads((grid / "grid.json").read_text())
    del record["planned"]
    (grid / "grid.json").write_text(json.dumps(record))
    code, _, err = hb("report", grid, "--baseline", "uniform", "--resamples", "20", "--k", "1")
    assert code == 0 and "is unfinished (its marker says incomplete" in err
    assert "this report covers its 2 finished cells" in err
    # the run finishes the grid; collect then marks it complete
    assert hb("grid", "run", base / "tiny.toml", "--out", grid, "--jobs", "1")[0] == 0
    assert hb("grid", "collect", grid)[0] == 0 and folders.read_marker(grid)["state"] == "complete"


def test_recollect_collects_missing_tables_for_part(tmp_path, hb):
    parts = ('name = "p"\nsteps = 3\nseeds = 1\n' + "".join(
        f'[[parts]]\nname = "{p}"\nenv = {{kind = "bernoulli", n_validation_tasks = 4}}\n'
        'policies = [{name = "uniform"}, {name = "round_robin"}]\n' for p in ("a", "b")))
    (tmp_path / "parts.toml").write_text(parts)
    assert hb("grid", "run", tmp_path / "parts.toml", "--out", tmp_path / "g", "--jobs", "1")[0] == 0
    before = tree_hash(tmp_path / "g")
    code, _, err = hb("report", tmp_path / "g", "--baseline", "uniform", "--part", "a", "--resamples", "20", "--k", "1")
    assert code == 2 and err == (f"error: --part 'a': DIR {str(tmp_path / 'g')!r} is a grid whose tables were "
                                 "never collected (no eval.parquet); --part reads the collected tables: run "
                                 f"`hb grid collect {tmp_path / 'g'}` or pass --recollect\n")
    assert tree_hash(tmp_path / "g") == before
    code, _, err = hb("report", tmp_path / "g", "--baseline", "uniform", "--part", "a", "--resamples", "20",
                      "--k", "1", "--recollect")
    assert code == 0, err[-3000:]
    assert "collected" in err and "(its tables were missing)" in err and (tmp_path / "g" / "eval.parquet").is_file()


def test_recollect_with_part_on_a_grid_without_parts_is_refused_before_collecting(tmp_path, hb):
    plain = 'name = "plain"\nsteps = 3\nseeds = 1\n[env]\nkind = "bernoulli"\n[[policies]]\nname = "uniform"\n'
    (tmp_path / "plain.toml").write_text(plain)
    assert hb("grid", "run", tmp_path / "plain.toml", "--out", tmp_path / "g", "--jobs", "1")[0] == 0
    before = tree_hash(tmp_path / "g")
    code, _, err = hb("report", tmp_path / "g", "--baseline", "uniform", "--part", "a", "--recollect")
    assert code == 2 and err == (f"error: --part: got 'a', but no cell of grid {str(tmp_path / 'g')!r} belongs to a "
                                 "part: only a collected grid of parts (hb stress, a grid file with [[parts]]) has "
                                 "parts\n")
    assert tree_hash(tmp_path / "g") == before and not (tmp_path / "g" / "eval.parquet").exists()
