"""The store's atomic cell writes and the progress bar's format (in-process, fast)."""
from __future__ import annotations

import io

import pytest

from ablations import store
from ablations.runner import ProgressBar
from hbsim.contract import atomic
from hbsim.contract.atomic import write_dir_atomic
from hbsim.contract.records import done_ids, is_complete


def test_cell_write_is_all_or_nothing(tmp_path):
    (tmp_path / "cells").mkdir()

    def good(tmp):
        (tmp / "train.parquet").write_text("t")
        (tmp / "run.json").write_text("{}")
        (tmp / "log.txt").write_text("ok")

    def bad(tmp):
        (tmp / "train.parquet").write_text("partial")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        write_dir_atomic(tmp_path / "cells" / "aaaa", bad, keep=is_complete)
    assert list((tmp_path / "cells").iterdir()) == []          # no cell, no temporary left
    store.write_failure(tmp_path, "bbbb", "Traceback\nValueError: boom\n")
    assert store.failed_ids(tmp_path) == {"bbbb"}
    assert store.failure_reason(tmp_path, "bbbb") == "ValueError: boom"
    assert write_dir_atomic(tmp_path / "cells" / "bbbb", good, keep=is_complete) is True
    assert done_ids(tmp_path) == {"bbbb"} and store.failed_ids(tmp_path) == set()
    assert (tmp_path / "cells" / "bbbb" / "log.txt").read_text() == "ok"
    # a second writer of the same cell loses the rename race without damage
    second = lambda tmp: (tmp / "x").write_text("2")  # noqa: E731
    assert write_dir_atomic(tmp_path / "cells" / "bbbb", second, keep=is_complete) is False
    assert sorted(p.name for p in (tmp_path / "cells" / "bbbb").iterdir()) == ["log.txt", "run.json", "train.parquet"]
    # without keep (a replacing run) a complete run is swapped for the new one; an incomplete one always is
    assert write_dir_atomic(tmp_path / "cells" / "bbbb", second) is True
    assert sorted(p.name for p in (tmp_path / "cells" / "bbbb").iterdir()) == ["x"]
    assert write_dir_atomic(tmp_path / "cells" / "bbbb", good, keep=is_complete) is True
    assert sorted(p.name for p in (tmp_path / "cells" / "bbbb").iterdir()) == ["log.txt", "run.json", "train.parquet"]
    # leftovers of killed writers are hidden from done_ids and removed by atomic.remove_temp
    (tmp_path / "cells" / ".tmp-cccc-123").mkdir()
    (tmp_path / "cells" / "..tmp-cccc-123.tmp-xyz").mkdir()
    assert done_ids(tmp_path) == {"bbbb"}
    assert atomic.remove_temp(tmp_path / "cells") == 2 and done_ids(tmp_path) == {"bbbb"}
    assert sorted(p.name for p in (tmp_path / "cells").iterdir()) == ["bbbb"]


def test_progress_bar_on_a_terminal_and_in_a_log():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    tty = Tty()
    bar = ProgressBar(stream=tty, width=10)
    bar(2, 10, 0)
    bar(5, 10, 1)
    bar(10, 10, 1)
    frames = tty.getvalue().split("\r")[1:]
    assert frames[0].startswith("[##........] 2/10 cells  0.0 cells/s  ETA --:--:--")
    assert frames[1].startswith("[#####.....] 5/10 cells ") and frames[1].endswith("(1 failed)")
    assert frames[2].startswith("[##########] 10/10 cells ") and frames[2].endswith("ETA 0:00:00  (1 failed)\n")
    log = io.StringIO()
    bar = ProgressBar(stream=log, width=10)
    for done in range(0, 101):
        bar(done, 100, 0)
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue() and 10 <= len(lines) <= 12       # one line per ~10%, not 101
    assert lines[-1].startswith("[##########] 100/100 cells")


def test_progress_bar_restarts_its_rate_for_a_second_batch():
    """run_tuned hands one bar to both phases: the test phase's counts start below the tuning
    phase's, and the bar starts over (no negative rate)."""
    log = io.StringIO()
    bar = ProgressBar(stream=log, width=10)
    for done in (5, 8, 10):
        bar(done, 10, 0)
    bar(2, 20, 0)
    bar(20, 20, 0)
    lines = log.getvalue().splitlines()
    assert lines[3] == "[#.........] 2/20 cells  0.0 cells/s  ETA --:--:--"
    assert "-" not in lines[4].split("cells/s")[0] and lines[4].startswith("[##########] 20/20 cells")
