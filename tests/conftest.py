"""The suite's tiers, and the guard that keeps `make test-fast` free of spawned processes.

Every test gets exactly one tier marker (select with `pytest -m unit` etc.):

* `unit`: in memory, one function or class, no torch: the inner loop (`make test-unit`: its tests
  that start no process, about 45 s on one core);
* `roundtrip`: writes and reads files (run folders, grids, reports, checkpoints, resume);
* `cli`: drives an `hb` command (in process through hbsim.cli.main, or a subprocess if `slow`);
* `calibration`: a statistical property by simulation (coverage, A/A level, power at the
  reported mde, Monte-Carlo agreement, a scenario's shipped effect): slow by nature, in memory;
* `torch`: needs torch or TRL in this process (the real-run model, trainer, sketch, adapter,
  the TRL integration). Only the files of `TORCH_FILES` import them at module level
  (tests/test_tiers.py checks it), and a run whose `-m` rules out the `torch` tier does not
  collect those files, so `pytest -m unit` never imports torch (a unit or calibration test
  that imports it fails).

How a test gets its tier:

* an explicit `@pytest.mark.unit|roundtrip|cli|calibration|torch` (on the test or the module) wins;
* else `cli` for the files whose every test drives an `hb` command (`CLI_FILES`);
* else `torch` for the files of `TORCH_FILES` (where no other tier may be given);
* else `roundtrip` for a test that uses `tmp_path`/`tmp_path_factory`, directly or through
  a fixture (it writes and reads files);
* else `unit`.

`make test` runs every tier; `make test-unit` the unit tier's tests that are not `slow`, `make test-fast` everything
but `slow`.

`slow` is separate: a test that starts a process (an interpreter, the `hb` console script,
a worker pool, torchrun, a browser) must be marked `slow`; `make test-fast` runs
`-m "not slow"`. Outside `slow` tests, starting a Python process, the `hb` script or a
multiprocessing worker fails the test with a message saying so. (Other programs, such as
the `fc-list` probe matplotlib runs when it builds its font cache, are let through.)

The shared helpers (ablations_testkit, reports_synth, reference_hb, ...) are importable by
name through pyproject's `pythonpath`; no test edits `sys.path`.
"""
from __future__ import annotations

import itertools
import multiprocessing.util
import os
import re
import subprocess
import sys

import pytest
from _pytest.mark.expression import Expression

from hbsim.contract import threads

if os.environ.get("PYTEST_XDIST_WORKER"):
    # `make test` runs two workers on two cores: one BLAS / OpenMP / torch thread each (and in every
    # process a test starts), as the grid runner pins its workers; each worker's numpy and torch
    # threads spinning against the other worker's cost the suite about a quarter of its time.
    # A thread variable the user set wins (hbsim.contract.threads).
    threads.pin_one_thread(this_process=True)

TIERS = ("unit", "roundtrip", "cli", "calibration", "torch")
CLI_FILES = {"test_user_inputs.py", "test_user_errors.py", "test_user_writes.py", "test_hbsim_cli.py", "test_policies_cli.py", "test_real_runs_cli.py",
             "test_reports_cli.py", "test_ablations_run.py", "test_ablations_resume.py", "test_ablations_demo.py"}
#: the test files that import torch or TRL (directly or through real_runs.native / trl_grpo)
TORCH_FILES = {"test_real_runs_adapter.py", "test_real_runs_model.py", "test_real_runs_sketch.py",
               "test_real_runs_trainer.py", "test_real_runs_warmstart.py", "test_real_runs_trl.py", "test_real_runs_trl_lm.py", "test_real_runs_lm_cache.py",
               "test_real_runs_verl_sketch.py"}
TORCH_MODULES = ("torch", "trl", "transformers")
#: tiers that must run without torch in the process
TORCH_FREE = ("unit", "calibration")
FILE_FIXTURES = {"tmp_path", "tmp_path_factory"}


def _may_select(markexpr: str, tier: str) -> bool:
    """Whether `-m markexpr` can select a test of `tier`, whatever its other markers (slow, ...)."""
    try:
        expr = Expression.compile(markexpr)
    except SyntaxError:
        return True                                    # pytest reports it
    names = set(re.findall(r"[\w:+\-.\[\]\\/]+", markexpr))     # pytest's identifier characters
    free = sorted(names - {"and", "or", "not"} - set(TIERS))
    if len(free) > 10:
        return True
    for values in itertools.product((False, True), repeat=len(free)):
        marks = {tier, *itertools.compress(free, values)}
        if expr.evaluate(lambda name, **_: name in marks):
            return True
    return False


def pytest_ignore_collect(collection_path, config):
    """A torch file is not even imported when `-m` rules its tier out (`-m unit`: no torch)."""
    markexpr = config.option.markexpr
    if collection_path.name in TORCH_FILES and markexpr and not _may_select(markexpr, "torch"):
        return True
    return None


#: (the torch files collected, the TORCH_MODULES loaded) once every test file is imported: tests/test_tiers.py
COLLECTED = pytest.StashKey[tuple]()


#: the files that take longest (worker seconds in `pytest -n 2 --dist loadfile --durations=0`,
#: docs/PERFORMANCE.md "make test"; 2026-12-06: 160 s for the twin's identifiability down to 16 s),
#: longest first: collected first, so that with `--dist loadfile --no-loadscope-reorder` (the Makefile)
#: pytest-xdist's workers start on them and the many small files fill in behind. (Its default order,
#: by number of tests, sent these files, which hold few tests each, to the workers last.)
LONGEST_FIRST = ("test_ablations_twin_identify.py", "test_fault_injection.py", "test_real_runs_verl09_package.py",
                 "test_real_runs_lm.py", "test_real_runs_trl_lm.py", "test_scenario_claims.py",
                 "test_real_runs_cli.py", "test_real_runs_skyrl_package.py", "test_reports_budget.py",
                 "test_real_runs_verl_package.py", "test_extending.py", "test_reports_inference.py",
                 "test_real_runs_adapter.py", "test_reports_cli.py", "test_real_runs_trl.py", "test_user_inputs.py")


def _longest_first(items: list) -> None:
    """Reorder `items` in place: the files of LONGEST_FIRST first, in its order; every other file
    after them in collection order; a file's tests stay together and in order (a stable sort)."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


def pytest_collection_modifyitems(config, items):
    _longest_first(items)
    config.stash[COLLECTED] = (sorted({item.path.name for item in items} & TORCH_FILES),
                               sorted(set(TORCH_MODULES) & sys.modules.keys()))
    for item in items:
        explicit = [tier for tier in TIERS if item.get_closest_marker(tier)]
        if len(explicit) > 1:
            raise pytest.UsageError(f"{item.nodeid} has tiers {explicit}: give it one of {TIERS}")
        if item.path.name in TORCH_FILES and explicit not in ([], ["torch"]):
            raise pytest.UsageError(f"{item.nodeid} is in a torch file (conftest.TORCH_FILES): its tier is torch, "
                                    f"not {explicit[0]}; move it to a file of its tier")
        if explicit:
            continue
        if item.path.name in CLI_FILES:
            tier = "cli"
        elif item.path.name in TORCH_FILES:
            tier = "torch"
        elif FILE_FIXTURES & set(getattr(item, "fixturenames", ())):
            tier = "roundtrip"
        else:
            tier = "unit"
        item.add_marker(tier)


class SpawnedProcess(AssertionError):
    pass


class ImportedTorch(AssertionError):
    pass


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """A unit or calibration test that imports torch or TRL fails (seen when they were not loaded before)."""
    before = set(TORCH_MODULES) & sys.modules.keys()
    result = yield
    if any(item.get_closest_marker(tier) for tier in TORCH_FREE):
        new = sorted((set(TORCH_MODULES) & sys.modules.keys()) - before)
        if new:
            raise ImportedTorch(f"{item.nodeid} imports {', '.join(new)}: mark it torch (or move it to a torch file)")
    return result


def _is_ours(program) -> bool:
    """A Python interpreter or the `hb` script: the processes this suite itself starts."""
    name = os.path.basename(os.fsdecode(program))
    return program == sys.executable or name.startswith("python") or name == "hb"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Outside `slow` tests (their fixtures included), refuse to start our own processes."""
    if item.get_closest_marker("slow"):
        yield
        return

    def refuse(what):
        raise SpawnedProcess(f"{item.nodeid} starts {what}: mark it @pytest.mark.slow (make test-fast skips those)")

    execute, spawnv, fork = subprocess.Popen._execute_child, multiprocessing.util.spawnv_passfds, os.fork

    def execute_child(self, args, executable, *rest, **kw):
        argv = [args] if isinstance(args, (str, bytes, os.PathLike)) else list(args)
        if _is_ours(executable or argv[0]):
            refuse(f"a process ({argv[0]})")
        return execute(self, args, executable, *rest, **kw)

    subprocess.Popen._execute_child = execute_child
    multiprocessing.util.spawnv_passfds = lambda *a, **k: refuse("a multiprocessing server")
    os.fork = lambda: refuse("a forked process")
    jobs = os.environ.get("HB_REPORT_JOBS")
    os.environ["HB_REPORT_JOBS"] = "1"  # `hb report` in this process (its forked helper: the slow tests)
    try:
        yield
    finally:
        subprocess.Popen._execute_child, multiprocessing.util.spawnv_passfds, os.fork = execute, spawnv, fork
        if jobs is None:
            os.environ.pop("HB_REPORT_JOBS", None)
        else:
            os.environ["HB_REPORT_JOBS"] = jobs
