"""The suite's tiers, and the guard that keeps `make test-fast` free of spawned processes.

Every test gets exactly one tier marker (select with `pytest -m unit` etc.):

* an explicit `@pytest.mark.unit|roundtrip|cli` (on the test or the module) wins;
* else `cli` for the files whose every test drives an `hb` command (`CLI_FILES`);
* else `roundtrip` for a test that uses `tmp_path`/`tmp_path_factory`, directly or through
  a fixture (it writes and reads files);
* else `unit`.

`slow` is separate: a test that starts a process (an interpreter, the `hb` console script,
a worker pool, torchrun, a browser) must be marked `slow`; `make test-fast` runs
`-m "not slow"`. Outside `slow` tests, starting a Python process, the `hb` script or a
multiprocessing worker fails the test with a message saying so. (Other programs, such as
the `fc-list` probe matplotlib runs when it builds its font cache, are let through.)

The shared helpers (ablations_testkit, reports_synth, reference_hb, ...) are importable by
name through pyproject's `pythonpath`; no test edits `sys.path`.
"""
from __future__ import annotations

import multiprocessing.util
import os
import subprocess
import sys
import pytest

TIERS = ("unit", "roundtrip", "cli")
CLI_FILES = {"test_user_inputs.py", "test_hbsim_cli.py", "test_policies_cli.py", "test_real_runs_cli.py",
             "test_reports_cli.py", "test_ablations_run.py", "test_ablations_resume.py", "test_ablations_demo.py"}
FILE_FIXTURES = {"tmp_path", "tmp_path_factory"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        explicit = [tier for tier in TIERS if item.get_closest_marker(tier)]
        if len(explicit) > 1:
            raise pytest.UsageError(f"{item.nodeid} has tiers {explicit}: give it one of {TIERS}")
        if explicit:
            continue
        if item.path.name in CLI_FILES:
            tier = "cli"
        elif FILE_FIXTURES & set(getattr(item, "fixturenames", ())):
            tier = "roundtrip"
        else:
            tier = "unit"
        item.add_marker(tier)


class SpawnedProcess(AssertionError):
    pass


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
