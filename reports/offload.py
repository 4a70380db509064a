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

import os
import sys
import threading
from collections import deque
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Callable

from hbsim.contract import lifeline
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
    return 2 if lifeline.can_fork() and (os.cpu_count() or 1) >= 2 else 1


def check_jobs(jobs) -> int:
    """``--jobs``: 1 (everything in this process) or 2 (one forked helper)."""
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs not in (1, 2):
        raise UserError(f"--jobs: got {jobs!r}, allowed: 1 (one process) or 2 (a forked helper for the views "
                        "and half the figures)")
    return jobs


#: what the helper was handed at its fork (`Helper`): the state its calls work on
_STATE: dict = {}
_CARRY: list = [None]
#: test hook: the helper kills itself (SIGKILL) at the start of its N-th call (0: in its
#: start-up, before any call) -- tests/test_fault_injection.py and the offload tests; no other use
KILL_ENV = "HB_HELPER_KILL_AT"
_calls = [0]


def _fault_point(at: int) -> None:
    lifeline.fault_point(KILL_ENV, at)


def _init(state: dict, carry, hb_pid: int) -> None:
    lifeline.ignore_interrupts_here()              # Ctrl-C is hb's: it stops the helper (close)
    lifeline.exit_with(hb_pid)                     # and the helper never outlives hb, kill -9 included
    _STATE.clear()
    _STATE.update(state)
    _CARRY[0] = carry
    _calls[0] = 0
    _fault_point(0)


def _call(fn: Callable, *args):
    _calls[0] += 1
    _fault_point(_calls[0])
    value = fn(_STATE, *args)
    return value, (_CARRY[0](_STATE) if _CARRY[0] is not None else None)


#: the line printed once when the helper process ends before its work is done
DIED = ("the report's helper process ended before its work was done (killed, or out of memory); "
        "this process does that work instead: the same numbers, on one core")


class _Call(Future):
    """A call handed to `Helper.submit`: ``result()`` waits for the helper, or, when the
    helper process has died, does the call here (with every earlier call not yet done,
    in the order submitted) and returns that."""

    def __init__(self, helper: "Helper", fn: Callable, args: tuple):
        super().__init__()
        self._helper, self._fn, self._args = helper, fn, args

    def result(self, timeout=None):
        self._helper._settle(self)
        return super().result(timeout)

    def exception(self, timeout=None):
        self._helper._settle(self)
        return super().exception(timeout)


class Helper:
    """One forked helper process holding ``state`` (inherited at the fork, never pickled),
    or, with ``jobs`` 1 or no fork, this process. ``submit(fn, *args)`` runs
    ``fn(state, *args)`` there and returns a Future; arguments and results are pickled.
    Calls run one at a time, in the order submitted, and each is handed to the helper only
    when the one before has finished, so a call not yet started can still be cancelled
    (and done by the caller instead: `values.Later.steal`).

    ``carry(state)`` (optional): what of the helper's state a call may change (e.g. a
    random generator's state); it is sent back with each result and put into this
    process's ``state`` by ``restore(state, carried)``, so this process's state follows
    the helper's from call to call.

    The failure path: if the helper process dies (kill -9, the OOM killer, a crash) at
    any moment, its unfinished calls are done in this process when their results are
    asked for -- state as the helper had it after its last finished call (``carry``), the
    same numbers as ``jobs`` 1 -- and one line (DIED) goes to stderr. ``close()`` waits for
    the helper to end; ``close(cancel=True)`` (a stop: Ctrl-C, an error) cancels what has
    not started and kills the helper if it is still at work. The helper ends with hb
    (`hbsim.contract.lifeline`), and ignores Ctrl-C, which is hb's to handle."""

    def __init__(self, jobs: int, state: dict, carry: Callable | None = None, restore: Callable | None = None):
        self.state = state
        self._restore = restore
        self._pool = None
        self._queue: deque = deque()  # (call, fn, args) not yet handed to the helper
        self._calls: list[_Call] = []  # every call submitted, in order
        self._busy = False
        self._lock = threading.RLock()
        self._death: Future = Future()  # done when the helper process has died
        if check_jobs(jobs) > 1 and lifeline.fork_context() is not None:
            self._pool = ProcessPoolExecutor(1, mp_context=lifeline.fork_context(),
                                             initializer=_init, initargs=(state, carry, os.getpid()))

    @property
    def forked(self) -> bool:
        """Whether calls run in a helper process (else in this one, at submit)."""
        return self._pool is not None

    @property
    def died(self) -> bool:
        """Whether the helper process died before its work was done."""
        return self._death.done()

    def submit(self, fn: Callable, *args) -> Future:
        call = _Call(self, fn, args)
        if self._pool is None:
            self._run_here(call)
            return call
        with self._lock:
            self._calls.append(call)
            self._queue.append((call, fn, args))
        self._next()
        return call

    def _run_here(self, call: _Call) -> None:
        try:
            value = call._fn(self.state, *call._args)
        except Exception as exc:  # noqa: BLE001 -- handed to the caller by result(), as from the helper
            call.set_exception(exc)
        else:
            call.set_result(value)

    def _next(self) -> None:
        """Hand the next call that was not cancelled to the helper, if it is idle and alive.
        The call is handed over after the lock is released: a call the helper finished before
        its callback was attached runs `_finished` at once, in this thread."""
        with self._lock:
            if self._busy or self._pool is None or self.died:
                return
            while self._queue:
                call, fn, args = self._queue.popleft()
                if call.set_running_or_notify_cancel():
                    self._busy, pool = True, self._pool
                    break
            else:
                return
        try:
            with lifeline.interrupts_blocked():      # the first submit forks the helper (module doc of lifeline)
                ran = pool.submit(_call, fn, *args)
        except (BrokenProcessPool, RuntimeError):    # the helper died (or the pool was shut down) before
            self._died()
            return
        ran.add_done_callback(lambda f, c=call: self._finished(c, f))

    def _finished(self, call: _Call, ran: Future) -> None:
        if ran.cancelled() or isinstance(ran.exception(), BrokenProcessPool):
            self._died()                 # `call` stays unfinished: its result() does it here
            return
        if ran.exception() is not None:
            call.set_exception(ran.exception())
        else:
            value, carried = ran.result()
            if self._restore is not None:
                self._restore(self.state, carried)
            call.set_result(value)
        with self._lock:
            self._busy = False
        self._next()

    def _died(self) -> None:
        with self._lock:
            if self._death.done():
                return
            self._busy = False
            self._death.set_result(True)
        print(f"hb report: {DIED}", file=sys.stderr, flush=True)

    def _settle(self, call: _Call) -> None:
        """Return when ``call`` is done; if the helper died first, do it here (module doc)."""
        if call.done():
            return
        lifeline.wait_first([call, self._death])     # a Ctrl-C cannot leave their locks held
        if call.done():
            return
        with self._lock:
            earlier = self._calls[: self._calls.index(call) + 1]
        for each in earlier:
            with self._lock:
                if each.done():
                    continue
                self._queue = deque(q for q in self._queue if q[0] is not each)
            self._run_here(each)

    def close(self, cancel: bool = False) -> None:
        if self._pool is None:
            return
        with self._lock:
            if cancel:
                for call, _, _ in self._queue:
                    call.cancel()
                self._queue.clear()
            pool, self._pool, busy = self._pool, None, self._busy
        if cancel and busy:              # a stop: do not wait for work no one will read
            lifeline.stop_executor(pool)
            return
        pool.shutdown(wait=True, cancel_futures=cancel)
