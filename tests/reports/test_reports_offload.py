"""`reports.offload`: the forked helper of `hb report --jobs 2` gives the same numbers and
files as one process; bad values of --jobs / $HB_REPORT_JOBS are one line."""
from __future__ import annotations

import os
import threading
from concurrent.futures import Future

import pytest

from policies.errors import UserError
from reports import build_report, offload
from reports_synth import make_synthetic, write_grid


def _double(state, x):
    return state["k"] * x


def _item(state, i):
    return state["k"][i]


def _fail(state, x):
    raise UserError(f"bad {x}")


@pytest.mark.parametrize("jobs", [0, 3, "2", 1.0, True, None])
def test_bad_jobs_are_refused(jobs):
    with pytest.raises(UserError, match=r"--jobs: got .*allowed: 1 \(one process\) or 2"):
        offload.check_jobs(jobs)


def test_default_jobs_from_the_environment(monkeypatch):
    monkeypatch.setenv(offload.JOBS_ENV, "1")
    assert offload.default_jobs() == 1
    monkeypatch.setenv(offload.JOBS_ENV, "two")
    with pytest.raises(UserError, match="HB_REPORT_JOBS: got 'two', allowed: 1 or 2"):
        offload.default_jobs()
    monkeypatch.setenv(offload.JOBS_ENV, "5")
    with pytest.raises(UserError, match="HB_REPORT_JOBS: got '5', allowed: 1 or 2"):
        offload.default_jobs()


def test_helper_in_this_process_runs_at_submit_in_order():
    helper = offload.Helper(1, {"k": 3})
    assert not helper.forked
    assert [helper.submit(_double, x).result() for x in (1, 2)] == [3, 6]
    with pytest.raises(UserError, match="bad 7"):
        helper.submit(_fail, 7).result()
    helper.close()


@pytest.mark.slow
def test_forked_helper_sees_its_state_and_returns_errors():
    big = list(range(10 ** 6))  # inherited at the fork, never pickled
    helper = offload.Helper(2, {"k": big})
    try:
        assert helper.forked
        assert helper.submit(_item, 123456).result() == 123456
        with pytest.raises(UserError, match="bad 1"):
            helper.submit(_fail, 1).result()
    finally:
        helper.close()


def _files(root):
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not p.name.startswith(".")}


@pytest.mark.slow
def test_two_jobs_write_the_same_bytes_as_one(tmp_path):
    ev, tr = make_synthetic({"base": 0.0, "hb": 0.6, "rr": 0.2}, n_seeds=4, n_tasks=(40, 30), attempts=(1, 3),
                            eval_steps=(6, 12))
    write_grid(tmp_path / "g", ev, tr)
    one = build_report(tmp_path / "g", "base", tmp_path / "one", resamples=300, jobs=1)
    two = build_report(tmp_path / "g", "base", tmp_path / "two", resamples=300, jobs=2)
    a, b = _files(tmp_path / "one"), _files(tmp_path / "two")
    assert a.keys() == b.keys() and len(a) > 30
    assert [name for name in a if a[name] != b[name]] == []
    assert set(one.tables) == set(two.tables) and len(two.views.tables["iqm_steps"]) > 0


def test_doc_renders_figures_in_batches_with_the_bytes_of_a_plain_save(tmp_path, monkeypatch):
    import base64

    import matplotlib.pyplot as plt

    from reports import figures, page

    made = []

    def fig(i):
        f, ax = plt.subplots(figsize=(2, 1.5))
        ax.plot([0, 1], [0, i])
        made.append(f)
        return f, ax

    monkeypatch.setattr(page, "OPEN_FIGURES", 2)
    doc = page.Doc(tmp_path)
    for i in range(5):
        doc.p(f"before {i}")
        doc.figure(f"f{i}", fig(i))
        assert len(doc._pending) < 2  # rendered every second figure
    body = doc.body_html()
    # the doc closed every figure it rendered (figures other tests of this process left open aside)
    assert sorted(doc.figs) == [f"f{i}" for i in range(5)] and len(made) == 5
    assert not [f.number for f in made if plt.fignum_exists(f.number)]
    for i in range(5):
        f, _ = fig(i)
        figures.save(f, tmp_path / f"plain{i}.png")
        png = (tmp_path / f"f{i}.png").read_bytes()
        assert png == (tmp_path / f"plain{i}.png").read_bytes()
        assert f'<img alt="f{i}" src="data:image/png;base64,{base64.b64encode(png).decode()}">' in body
    assert body.index("before 3") < body.index('alt="f3"') < body.index("before 4")


def _sleepy(state, seconds):
    import time

    time.sleep(seconds)
    return seconds


@pytest.mark.slow
def test_a_call_not_yet_handed_to_the_helper_can_be_stolen():
    from reports import values

    helper = offload.Helper(2, {"k": 2})
    try:
        first = helper.submit(_sleepy, 0.5)
        later = values.Later(helper.submit(_double, 21), lambda: -1, lambda v: v)
        later.steal()  # the helper is busy with `first`: the second call is done here instead
        assert later.future is None and later.result() == -1 and first.result() == 0.5
        ran = values.Later(helper.submit(_double, 4), lambda: -1, lambda v: v)
        assert ran.result() == 8  # not stolen: the helper's value
    finally:
        helper.close()


def test_iqm_over_steps_final_step_has_the_summary_interval():
    ev, tr = make_synthetic({"base": 0.0, "hb": 0.6, "rr": 0.2}, n_seeds=4, n_tasks=(40, 30), attempts=(1, 3),
                            eval_steps=(6, 12))
    res = build_report((ev, tr), "base", resamples=300)
    steps, agg, summ = res.tables["iqm_steps"], res.tables["aggregates"], res.tables["summary"]
    assert "final" not in steps.columns and set(steps["step"]) == {6, 12}
    for (suite, metric, pol), row in steps[steps["step"] == 12].set_index(["suite", "metric", "policy"]).iterrows():
        s = summ[(summ["suite"] == suite) & (summ["metric"] == metric) & (summ["policy"] == pol)].iloc[0]
        a = agg[(agg["suite"] == suite) & (agg["policy"] == pol) & (agg["aggregate"] == "iqm")].iloc[0]
        assert (row["low"], row["high"]) == (s["iqm_low"], s["iqm_high"]) == (a["low"], a["high"])
        assert row["iqm"] == s["iqm"]
    early = steps[steps["step"] == 6]
    assert len(early) == 6 and (early["low"] <= early["iqm"]).all() and (early["iqm"] <= early["high"]).all()
    assert (early["high"] > early["low"]).all()


class _FinishedPool:
    """A pool whose call has finished before submit() returns (the helper was quicker than
    this thread): the done-callback then runs at once, in the submitting thread."""

    def submit(self, fn, *args):
        ran = Future()
        ran.set_result(fn(*args))
        return ran

    def shutdown(self, **kw):
        pass


def test_a_call_finished_before_its_callback_is_attached_does_not_deadlock(monkeypatch):
    helper = offload.Helper(1, {"x": 1})
    helper._pool = _FinishedPool()                   # a fork stand-in: calls run in _call, as in the helper
    monkeypatch.setattr(offload, "_STATE", {"x": 1})
    answers = {}

    def submit_two():
        first = helper.submit(lambda state, y: state["x"] + y, 41)
        second = helper.submit(lambda state, y: state["x"] * y, 5)
        answers["results"] = (first.result(timeout=5), second.result(timeout=5))

    worker = threading.Thread(target=submit_two, daemon=True)
    worker.start()
    worker.join(10)
    assert not worker.is_alive(), "submit() deadlocked on the helper's lock"
    assert answers["results"] == (42, 5)
    assert not helper._busy and not helper._queue


# -- the failure path: the helper process dies (kill -9, the OOM killer) ----------------------
def _draw(state, n):
    """A call that changes the helper's state: n draws from the stream in `state`."""
    return state["rng"].random(n).tolist()


def _carry(state):
    return state["rng"].bit_generator.state


def _restore(state, carried):
    state["rng"].bit_generator.state = carried


def _draws_with(jobs, monkeypatch, kill_at=None):
    import numpy as np

    if kill_at is None:
        monkeypatch.delenv(offload.KILL_ENV, raising=False)
    else:
        monkeypatch.setenv(offload.KILL_ENV, str(kill_at))     # inherited at the fork
    helper = offload.Helper(jobs, {"rng": np.random.default_rng(7)}, carry=_carry, restore=_restore)
    try:
        calls = [helper.submit(_draw, n) for n in (2, 3, 1, 4)]
        return [c.result(timeout=60) for c in calls], helper.died
    finally:
        helper.close()


@pytest.mark.slow
@pytest.mark.parametrize("kill_at", [0, 1, 2, 4])
def test_a_dead_helpers_calls_are_done_here_with_the_same_numbers(monkeypatch, capfd, kill_at):
    """Killed in its start-up (0) or at the start of its 1st, 2nd or last call: every result
    still arrives, equal to one process's (the stream's state followed the helper's), and
    one line says what happened."""
    alone, died = _draws_with(1, monkeypatch)
    assert not died and [len(d) for d in alone] == [2, 3, 1, 4]
    got, died = _draws_with(2, monkeypatch, kill_at)
    assert died and got == alone
    err = capfd.readouterr().err
    assert err.count(offload.DIED) == 1 and "Traceback" not in err


@pytest.mark.slow
def test_a_helper_killed_from_outside_in_the_middle_of_a_call(monkeypatch, tmp_path, capfd):
    """kill -9 of the helper about a second into a call (the OOM killer's way): the report
    does not wait forever, and a later submit after the death is done here too."""
    import signal
    import time

    monkeypatch.delenv(offload.KILL_ENV, raising=False)
    helper = offload.Helper(2, {"k": 3, "where": tmp_path / "pid", "parent": os.getpid()})
    try:
        busy = helper.submit(_report_pid_and_sleep, 30)
        queued = helper.submit(_double, 5)
        deadline = time.monotonic() + 60
        while not (tmp_path / "pid").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.0)
        os.kill(int((tmp_path / "pid").read_text()), signal.SIGKILL)
        started = time.monotonic()
        assert queued.result(timeout=60) == 15     # done here, in order: `busy` first (at once here)
        assert busy.result(timeout=1) == "here"
        assert helper.submit(_double, 2).result(timeout=5) == 6
        assert time.monotonic() - started < 30     # not the helper's 30 s sleep: it was not waited for
    finally:
        helper.close()
    assert capfd.readouterr().err.count(offload.DIED) == 1


def _report_pid_and_sleep(state, seconds):
    """In the helper: say its pid, then sleep; done here (taken back): at once."""
    import time

    if os.getpid() == state["parent"]:
        return "here"
    state["where"].write_text(str(os.getpid()))
    time.sleep(seconds)
    return "there"


@pytest.mark.slow
def test_close_with_cancel_kills_a_busy_helper_at_once(monkeypatch):
    """A stop (Ctrl-C, an error) does not wait for the helper's current call."""
    import time

    monkeypatch.delenv(offload.KILL_ENV, raising=False)
    helper = offload.Helper(2, {})
    helper.submit(_sleepy, 30)
    time.sleep(0.5)
    started = time.monotonic()
    helper.close(cancel=True)
    assert time.monotonic() - started < 10
