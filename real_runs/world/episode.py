"""One agent episode: a harness's control loop over a task's workspace.

This is the contract with the trainer::

    ep = Episode(harness, task)        # fresh copy of the task's workspace
    while not ep.done:
        completion = sample(ep.context(), stop=harness.stop)   # model continues the text
        ep.feed(completion)
    ep.reward()                        # checker on the final workspace / answer, in [0, 1]

``context()`` is the prompt followed, for every past turn, by the turn's completion
(cut at the first stop marker, which is then re-added, so a truncated completion reads
as if it had stopped), the observation, and the next turn's prefix. ``feed`` never
raises on model text: junk, truncation, unknown tools and wrong arguments are parse
failures (counted in ``parse_failures``; a multi-turn harness shows an error
observation and the turn is used up). The episode ends on an ``answer``/``finish``
call, after a single-turn harness's one reply, or at ``harness.max_turns``.
"""
from __future__ import annotations

from real_runs.world.harnesses import Harness
from real_runs.world.tasks import Task
from real_runs.world.workspace import ENDS_EPISODE, execute


class Episode:
    """State of one episode. Public fields: ``files`` (the workspace), ``answer``,
    ``done``, ``turns``, ``parse_failures``, ``tool_errors``, ``calls`` (list of
    ``(Call, ok)``)."""

    __slots__ = ("harness", "task", "files", "answer", "done", "turns", "parse_failures",
                 "tool_errors", "calls", "_parts")

    def __init__(self, harness: Harness, task: Task):
        self.harness = harness
        self.task = task
        self.files = task.workspace()
        self.answer: str | None = None
        self.done = False
        self.turns = 0
        self.parse_failures = 0
        self.tool_errors = 0
        self.calls: list = []
        self._parts = [harness.render(task)]

    def context(self) -> str:
        """Everything the model has seen so far; ends where the model continues."""
        return "".join(self._parts)

    def feed(self, completion: str) -> bool:
        """Parse and execute one model turn; returns ``done``. Feeding a finished
        episode changes nothing."""
        if self.done:
            return True
        h = self.harness
        text = completion.split(h.stop, 1)[0]
        self._parts.append(text + h.stop)
        self.turns += 1
        obs = ""
        for call in h.parse_turn(text):
            if call is None:
                self.parse_failures += 1
                obs = h.error
                break
            if call.tool in ENDS_EPISODE:
                self.calls.append((call, True))
                if call.tool == "answer":
                    self.answer = call.args[0]
                self.done = True
                break
            result = execute(self.files, call)
            self.calls.append((call, result.ok))
            self.tool_errors += not result.ok
            obs = h.observe(result)
        if h.loop == "single" or self.turns >= h.max_turns:
            self.done = True
        if not self.done:
            self._parts.append(obs + h.prefix)
        return self.done

    def reward(self) -> float:
        """The task's checker on the current workspace and answer, in [0, 1]."""
        return self.task.score(self.files, self.answer)
