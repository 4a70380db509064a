"""The suite's own rules (tests/conftest.py): one tier per test, no spawned process outside `slow`."""
import multiprocessing
import subprocess
import sys

import pytest

from conftest import TIERS, SpawnedProcess


def test_an_unmarked_test_cannot_start_python_or_a_worker():
    with pytest.raises(SpawnedProcess, match="test_tiers.py::.* starts a process .*mark it @pytest.mark.slow"):
        subprocess.run([sys.executable, "-c", "pass"])
    with pytest.raises(SpawnedProcess, match="starts a (process|multiprocessing server|forked process)"):
        multiprocessing.get_context("spawn").Process(target=print).start()
    assert subprocess.run(["true"]).returncode == 0      # other programs (matplotlib's fc-list probe) run


@pytest.mark.slow
def test_a_slow_test_may():
    assert subprocess.run([sys.executable, "-c", "print(6 * 7)"], capture_output=True, text=True).stdout == "42\n"


def test_every_test_has_exactly_one_tier(request):
    items = request.session.items
    assert items and all(sum(bool(item.get_closest_marker(t)) for t in TIERS) == 1 for item in items)
    assert request.node.get_closest_marker("unit")                   # in memory, not a CLI file: unit
