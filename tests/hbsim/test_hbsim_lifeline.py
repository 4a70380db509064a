"""`hbsim.contract.lifeline`: a Ctrl-C held while helpers start is delivered after, never lost;
`wait_for_exit` returns when a process has ended; `exit_with` is a no-op on itself.
(Whole commands killed with -9, and Ctrl-C while the forkserver starts:
tests/test_fault_injection.py.)"""
from __future__ import annotations

import os
import signal
import threading
from concurrent.futures import CancelledError, Future
from concurrent.futures import _base as futures_base

import pytest

from hbsim.contract import lifeline


def _press() -> None:
    os.kill(os.getpid(), signal.SIGINT)


def test_a_press_inside_deferred_is_raised_at_its_end_not_inside():
    reached = []
    with pytest.raises(KeyboardInterrupt):
        with lifeline.interrupts_deferred():
            _press()
            reached.append("after the press")    # the block is not cut short
    assert reached == ["after the press"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_deferred_without_a_press_raises_nothing():
    with lifeline.interrupts_deferred():
        pass
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_press_inside_blocked_is_never_lost():
    """Blocked in this thread: the press is held until the block ends, or, in a process with
    other threads that do not block it (a pytest-xdist worker), delivered through one of them
    at once; either way KeyboardInterrupt arrives, and the mask is back afterwards."""
    with pytest.raises(KeyboardInterrupt):
        with lifeline.interrupts_blocked():
            _press()
            for _ in range(10 ** 5):                          # give another thread the chance to take it
                pass
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, set())


def _free_in_another_thread(lock) -> bool:
    got = []
    thread = threading.Thread(target=lambda: got.append(lock.acquire(timeout=2) and (lock.release() or True)))
    thread.start()
    thread.join()
    return got == [True]


def test_a_press_while_wait_first_takes_the_futures_locks_leaves_none_held(monkeypatch):
    """The CI hang: `concurrent.futures.wait` takes each future's lock in turn, and a Ctrl-C
    between two of them left the first ones held by the main thread for good (the executor's
    manager thread then blocked on them at the stop). The press here lands after the third
    lock: it must surface as KeyboardInterrupt with every lock free again."""
    futures = [Future() for _ in range(6)]
    taken = futures_base._AcquireFutures.__enter__

    def enter_with_a_press(self):
        for i, future in enumerate(self.futures):
            future._condition.acquire()
            if i == 2:
                _press()
    monkeypatch.setattr(futures_base._AcquireFutures, "__enter__", enter_with_a_press)
    with pytest.raises(KeyboardInterrupt):
        lifeline.wait_first(futures, slice_seconds=0.01)
    monkeypatch.setattr(futures_base._AcquireFutures, "__enter__", taken)
    assert [_free_in_another_thread(f._condition) for f in futures] == [True] * 6
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_wait_first_returns_the_done_futures_with_their_outcomes():
    value, failed, cancelled, pending = Future(), Future(), Future(), Future()
    value.set_result(7)
    error = ValueError("worker died")
    failed.set_exception(error)
    cancelled.cancel()
    cancelled.set_running_or_notify_cancel()       # what an executor does with a cancelled item
    got = {id(f): (v, e) for f, v, e in lifeline.wait_first([value, failed, cancelled, pending])}
    assert got[id(value)] == (7, None) and got[id(failed)] == (None, error)
    assert got[id(cancelled)][0] is None and isinstance(got[id(cancelled)][1], CancelledError)
    assert id(pending) not in got


def test_wait_first_waits_across_slices_for_a_late_result():
    late = Future()
    timer = threading.Timer(0.1, late.set_result, args=("done",))
    timer.start()
    assert lifeline.wait_first([late], slice_seconds=0.02) == [(late, "done", None)]
    timer.join()


def test_ignored_drops_a_press():
    with lifeline.interrupts_ignored():
        _press()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_deferred_in_another_thread_is_a_no_op():
    seen = []

    def body():
        with lifeline.interrupts_deferred():
            seen.append(signal.getsignal(signal.SIGINT))
    t = threading.Thread(target=body)
    t.start()
    t.join()
    assert seen == [signal.default_int_handler]


@pytest.mark.slow                     # it forks a process
def test_wait_for_exit_returns_for_an_ended_process():
    pid = os.fork()
    if pid == 0:                      # the child ends at once
        os._exit(0)
    lifeline.wait_for_exit(pid)       # readable once it has ended (a zombie until reaped)
    assert os.waitpid(pid, 0)[0] == pid
    lifeline.wait_for_exit(pid)       # reaped: gone, returns at once


def test_exit_with_itself_starts_no_watch():
    before = threading.active_count()
    lifeline.exit_with(os.getpid())
    assert threading.active_count() == before
