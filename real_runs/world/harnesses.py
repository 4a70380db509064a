"""Agent harnesses: how a task is shown to the model and how its replies are read.

A :class:`Harness` bundles what differs between real agent harnesses:

* system prompt wording and context layout (``template``),
* tool schema notation and call syntax (``syntax``, see :mod:`real_runs.world.syntax`),
  including the tools' names,
* workspace view (``view``: file names only, so the agent must ``read``; or contents),
* observation format (``observe``),
* control loop: ``"single"`` (one reply holding up to ``max_calls`` calls, no feedback)
  or ``"multi"`` (one call per turn, the result fed back, at most ``max_turns`` turns).

Every model turn ends with the stop marker :data:`STOP` (``"\\n"``). Add a harness by
adding one entry to :data:`HARNESSES` (and its name to :data:`TRAIN_HARNESSES` or
:data:`HELDOUT_HARNESSES`).

Harness summary (completion examples for "copy ka.txt to mo.md"):

========  ======  ===================================  =========================
name      loop    call syntax                          observation
========  ======  ===================================  =========================
json      multi   {"tool":"copy","src":"ka.txt",...}   {"ok":true,"out":"ok"}
xml       single  <copy src="ka.txt" dst="mo.md"/>     (none)
func      multi   copy_file("ka.txt", "mo.md")         => 'ok'
shell     multi   cp ka.txt mo.md                      raw output / sh: error
sexp      single  (cp "ka.txt" "mo.md")                (none)
kv        single  tool=copy src=ka.txt dst=mo.md       (none)
react     multi   Copy[ka.txt, mo.md]   (held out)     Observation: ok
========  ======  ===================================  =========================
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable

from real_runs.world.syntax import (BracketSyntax, FuncSyntax, JsonSyntax, KvSyntax, SexpSyntax,
                              ShellSyntax, Syntax, XmlSyntax)
from real_runs.world.tasks import Task
from real_runs.world.workspace import ENDS_EPISODE, Call, Result
from policies.errors import UserError

STOP = "\n"
MAX_REPLY = 96     # bytes a turn may take: sample at most this many; longer replies fail to parse
LOOPS = ("single", "multi")


@dataclass(frozen=True)
class Harness:
    """One harness. ``template`` has the fields ``{system} {schema} {view} {task}`` and is
    followed by ``prefix`` (where the model writes); ``view(files) -> str`` renders the
    workspace; ``observe(result) -> str`` renders a tool result (multi-turn only);
    ``error`` is the observation for an unreadable call."""

    name: str
    syntax: Syntax
    system: str
    template: str
    view: Callable[[dict], str]
    observe: Callable[[Result], str] = lambda result: ""   # single-turn harnesses show none
    error: str = ""
    loop: str = "multi"
    max_turns: int = 5
    max_calls: int = 4
    prefix: str = ""
    stop: str = STOP
    show_contents: bool = False
    max_reply: int = MAX_REPLY

    def __post_init__(self):
        rules = {"loop": (self.loop in LOOPS, f"one of {LOOPS}"),
                 "max_turns": (self.max_turns == 1 or (self.loop == "multi" and self.max_turns > 1),
                               "1, or an integer > 1 for a multi-turn harness"),
                 "max_calls": (self.max_calls >= 1, "an integer >= 1"),
                 "max_reply": (self.max_reply >= 1, "an integer >= 1"),
                 "stop": (bool(self.stop), "a non-empty string")}
        for key, (ok, allowed) in rules.items():
            if not ok:
                raise ValueError(f"{key}={getattr(self, key)!r} is invalid for harness {self.name}: "
                                 f"allowed is {allowed}")

    def render(self, task: Task) -> str:
        """The prompt (before any model turn), ending with ``prefix``."""
        body = self.template.format(system=self.system, schema=self.syntax.schema,
                                    view=self.view(dict(task.files)), task=task.instruction)
        return body + self.prefix

    def parse_turn(self, text: str) -> list[Call | None]:
        """The calls of one reply (``text`` without the stop marker); a None entry
        marks an unreadable call (always the last entry)."""
        if len(text) > self.max_reply:
            return [None]
        if self.loop == "multi":
            return [self.syntax.parse(text)]
        calls = self.syntax.parse_many(text)
        if len(calls) > self.max_calls:
            calls = calls[: self.max_calls] + [None]
        return calls

    def plan(self, task: Task) -> list[Call]:
        """The canonical calls this harness's agent makes to solve ``task``."""
        calls = [c for c in task.solution if not (self.show_contents and c.tool == "read")]
        if self.loop == "multi" and calls[-1].tool not in ENDS_EPISODE:
            calls.append(Call("finish"))
        return calls

    def demonstration(self, task: Task) -> list[str]:
        """Per-turn completions (each ending with ``stop``) that solve ``task``."""
        text = [self.syntax.format(c) for c in self.plan(task)]
        if self.loop == "single":
            return [self.syntax.sep.join(text) + self.stop]
        return [t + self.stop for t in text]


HARNESSES: dict[str, Harness] = {h.name: h for h in (
    Harness(
        name="json", syntax=JsonSyntax(),
        system="You are a file agent. Call one tool per turn as JSON.",
        template="{system}\nTools: {schema}\n{view}\nTask: {task}\n",
        view=lambda files: "Files: " + (", ".join(sorted(files)) or "(none)"),
        error='{"ok":false,"out":"invalid call"}\n',
        observe=lambda r: json.dumps({"ok": r.ok, "out": r.out}, separators=(",", ":")) + "\n",
        loop="multi", max_turns=5, prefix="> "),
    Harness(
        name="xml", syntax=XmlSyntax(),
        system="Reply with XML tool tags that do the task.",
        template="{system}\n<tools>{schema}</tools>\n{view}\n<task>{task}</task>\n",
        view=lambda files: "\n".join(f'<file name="{k}">{v}</file>' for k, v in sorted(files.items())),
        loop="single", max_turns=1, prefix="<reply>", show_contents=True),
    Harness(
        name="func", syntax=FuncSyntax({"write": "write_file", "append": "append_line",
                                        "move": "rename", "copy": "copy_file",
                                        "delete": "remove", "read": "read_file",
                                        "finish": "done"}),
        system="# Python agent. Call one function per step.",
        template="{system}\n# api: {schema}\n{view}\n# goal: {task}\n",
        view=lambda files: "files = " + repr(sorted(files)), error="=> SyntaxError\n",
        observe=lambda r: (f"=> {r.out!r}" if r.ok else f"=> Error({r.out!r})") + "\n",
        loop="multi", max_turns=4, prefix=">>> "),
    Harness(
        name="shell", syntax=ShellSyntax(),
        system="You are in a shell. Run one command at a time.",
        template="{system}\n# cmds: {schema}\n# {task}\n{view}\n",
        view=lambda files: "$ ls\n" + " ".join(sorted(files)), error="sh: syntax error\n",
        observe=lambda r: ("" if r.out == "ok" else r.out + "\n") if r.ok else f"sh: {r.out}\n",
        loop="multi", max_turns=6, prefix="$ "),
    Harness(
        name="sexp", syntax=SexpSyntax({"write": "put", "delete": "rm", "read": "cat",
                                        "copy": "cp", "move": "mv", "finish": "end"}),
        system=";; Solve with s-expression calls.",
        template="{system}\n;; ops: {schema}\n;; fs: {view}\n;; do: {task}\n",
        view=lambda files: " ".join(f"({k} {json.dumps(v)})" for k, v in sorted(files.items())),
        loop="single", max_turns=1, prefix="> ", show_contents=True),
    Harness(
        name="kv", syntax=KvSyntax({"read": "show", "answer": "reply", "finish": "stop"}),
        system="Emit commands as key=value pairs, ' ; ' between them.",
        template="{system}\n{schema}\n{view}\nTASK {task}\n",
        view=lambda files: "\n".join(f"--- {k}\n{v}" for k, v in sorted(files.items())),
        loop="single", max_turns=1, prefix="CMD ", show_contents=True),
    Harness(
        name="react", syntax=BracketSyntax({"write": "Write", "append": "Append", "move": "Rename",
                                            "copy": "Copy", "delete": "Delete", "read": "Read",
                                            "answer": "Answer", "finish": "Finish"}),
        system="Solve the question with actions, one per step.",
        template="{system}\nActions: {schema}\n{view}\nQuestion: {task}\n",
        view=lambda files: "Workspace: " + (" ".join(sorted(files)) or "empty"),
        error="Observation: invalid action\n",
        observe=lambda r: "Observation: " + (r.out if r.ok else "error, " + r.out) + "\n",
        loop="multi", max_turns=5, prefix="Action: "),
)}

TRAIN_HARNESSES: list[str] = ["json", "xml", "func", "shell", "sexp", "kv"]
HELDOUT_HARNESSES: list[str] = ["react"]


def get_harness(name: str) -> Harness:
    """The registered harness ``name``; an unknown name raises UserError listing them."""
    try:
        return HARNESSES[name]
    except (KeyError, TypeError):
        raise UserError(f"harness={name!r} is unknown: allowed are {sorted(HARNESSES)}") from None
