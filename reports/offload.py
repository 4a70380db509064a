"""A report's second core: work handed to one forked helper process.

`hb report --jobs 2` (the default on Linux with two cores or more) runs independent parts
of a report in a helper process while this one goes on: rliable's views
(`rliable_views.ViewsBuilder`, a random stream of their own, so no number depends on the
timing), the summary's IQM replicates (`values.bootstrap_summary`: the generator's state
replayed, so the same draws) and half of the figures' PNG rendering
(`page.Doc.save_figures`). The helper is
forked, so it sees the data it needs without a copy or a pickle; it writes nothing: it
returns values (tables, PNG bytes), and this process writes every file (`atomic_write`
records what a command wrote). ``--jobs 1``, or a platform without ``fork`` (Windows), does
the same work in this process, with the same numbers and bytes.
"""
from __future__ import annotations

import multiprocessing
import os
import sys
import threading
from collections import deque
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Callable

from policies.errors import UserError

#: environment variable naming the default of ``--jobs`` (1 or 2); unset: `default_jobs`
JOBS_ENV = "HB_REPORT_JOBS"


def default_jobs() -> int:
    """``--jobs`` when not given: $HB_REPORT_JOBS, else 2 on Linux with two cores or more,
    else 1 (macOS can fork, but libraries there are not fork-safe: ``--jobs 2`` is the
    user's choice)."""
    text = os.environ.get(JOBS_ENV)
    if text is not None:
        if text.strip() not in ("1", "2"):
            raise UserError(f"{JOBS_ENV}: got {text!r}, allowed: 1 or 2 (the default of --jobs)")
        return int(text)
    forks = sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods()
    return 2 if forks and (os.cpu_count() or 1) >= 2 else 1


def check_jobs(jobs) -> int:
    """``--jobs``: 1 (everything in this process) or 2 (one forked helper)."""
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs not in (1, 2):
        raise UserError(f"--jobs: got {jobs!r}, allowed: 1 (one process) or 2 (a forked helper for the views "
                        "and half the figures)")
    return jobs


#: what the helper was handed at its fork (`Helper`): the state its calls work on
_STATE: dict = {}


def _init(state: dict) -> None:
    _STATE.clear()
    _STATE.update(state)


def _call(fn: Callable, *args):
    return fn(_STATE, *args)


class Helper:
    """One forked helper process holding ``state`` (inherited at the fork, never pickled),
    or, with ``jobs`` 1 or no fork, this process. ``submit(fn, *args)`` runs
    ``fn(state, *args)`` there and returns a Future; arguments and results are pickled.
    Calls run one at a time, in the order submitted, and each is handed to the helper only
    when the one before has finished, so a call not yet started can still be cancelled
    (and done by the caller instead: `values.Later.steal`). ``close()`` waits for the
    helper to end."""

    def __init__(self, jobs: int, state: dict):
        self.state = state
        self._pool = None
        self._queue: deque = deque()  # (future, fn, args) not yet handed to the helper
        self._busy = False
        self._lock = threading.Lock()
        if check_jobs(jobs) > 1 and "fork" in multiprocessing.get_all_start_methods():
            self._pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork"),
                                             initializer=_init, initargs=(state,))

    @property
    def forked(self) -> bool:
        """Whether calls run in a helper process (else in this one, at submit)."""
        return self._pool is not None

    def submit(self, fn: Callable, *args) -> Future:
        done: Future = Future()
        if self._pool is None:
            try:
                done.set_result(fn(self.state, *args))
            except Exception as exc:  # noqa: BLE001 -- handed to the caller by result(), as from the helper
                done.set_exception(exc)
            return done
        with self._lock:
            self._queue.append((done, fn, args))
        self._next()
        return done

    def _next(self) -> None:
        """Hand the next call that was not cancelled to the helper, if it is idle. The call is
        handed over after the lock is released: a call the helper finished before its callback
        was attached runs `_finished` at once, in this thread, which takes the lock."""
        with self._lock:
            if self._busy or self._pool is None:
                return
            while self._queue:
                done, fn, args = self._queue.popleft()
                if done.set_running_or_notify_cancel():
                    self._busy, pool = True, self._pool
                    break
            else:
                return
        pool.submit(_call, fn, *args).add_done_callback(lambda f, d=done: self._finished(d, f))

    def _finished(self, done: Future, ran: Future) -> None:
        if ran.cancelled():
            done.set_exception(RuntimeError("the report's helper process stopped before this call ran"))
        elif ran.exception() is not None:
            done.set_exception(ran.exception())
        else:
            done.set_result(ran.result())
        with self._lock:
            self._busy = False
        self._next()

    def close(self, cancel: bool = False) -> None:
        if self._pool is None:
            return
        if cancel:
            with self._lock:
                for done, _, _ in self._queue:
                    done.cancel()
                self._queue.clear()
        pool, self._pool = self._pool, None
        pool.shutdown(wait=True, cancel_futures=cancel)
