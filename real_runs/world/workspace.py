"""The in-memory workspace the agent acts on, and the canonical tool set.

A workspace is a plain ``dict[str, str]`` (file name -> text). Files hold lines joined
by ``"\\n"`` with no trailing newline. Every harness parses the model's text into the
same canonical :class:`Call` (a tool name from :data:`TOOLS` and its positional string
arguments); this module executes calls. Execution never raises: a bad call returns an
error observation and leaves the workspace as it was.
"""
from __future__ import annotations

from typing import NamedTuple

# canonical tool -> its argument names, in order (the one tool vocabulary of the task world)
TOOLS: dict[str, tuple[str, ...]] = {
    "write": ("path", "text"),     # create or overwrite a file
    "append": ("path", "text"),    # add one line at the end (creates the file if absent)
    "move": ("src", "dst"),        # rename
    "copy": ("src", "dst"),
    "delete": ("path",),
    "read": ("path",),             # observation = the file's text
    "answer": ("text",),           # final answer; ends the episode
    "finish": (),                  # ends the episode without an answer
}
ENDS_EPISODE = frozenset({"answer", "finish"})
MAX_FILES = 16            # a workspace may not grow past this (keeps contexts short)
MAX_TEXT = 64             # bytes per written argument


class Call(NamedTuple):
    """One parsed tool call: canonical ``tool`` name and positional ``args`` (strings)."""

    tool: str
    args: tuple[str, ...] = ()


class Result(NamedTuple):
    """Outcome of one executed call: ``ok`` and the observation text ``out``."""

    ok: bool
    out: str


def make_call(tool: str, args) -> Call | None:
    """A validated :class:`Call`, or None if ``tool`` is unknown or the arity is wrong.

    Non-string arguments (e.g. an int answer) are converted with ``str``.
    """
    args = tuple(args)
    if tool not in TOOLS or len(args) != len(TOOLS[tool]):
        return None
    if any(isinstance(a, bool) or not isinstance(a, (str, int)) for a in args):
        return None
    return Call(tool, tuple(str(a) for a in args))


def _bad_path(path: str) -> bool:
    return not path or len(path) > MAX_TEXT or any(c in path for c in " \n\t/\\\"'<>")


def execute(files: dict[str, str], call: Call) -> Result:
    """Apply ``call`` to ``files`` in place; never raises.

    ``answer``/``finish`` do not touch files (the episode records the answer).
    """
    tool, args = call
    if any(len(a) > MAX_TEXT or "\n" in a for a in args):
        return Result(False, "argument too long or multi-line")
    if tool in ("write", "append"):
        path, text = args
        if _bad_path(path):
            return Result(False, f"bad path {path!r}")
        if path not in files and len(files) >= MAX_FILES:
            return Result(False, "too many files")
        old = files.get(path)
        if tool == "write" or not old:
            files[path] = text
        else:
            files[path] = old + "\n" + text
        return Result(True, "ok")
    if tool in ("move", "copy"):
        src, dst = args
        if src not in files:
            return Result(False, f"no such file {src}")
        if _bad_path(dst):
            return Result(False, f"bad path {dst!r}")
        if dst not in files and len(files) >= MAX_FILES:
            return Result(False, "too many files")
        text = files.pop(src) if tool == "move" else files[src]
        files[dst] = text
        return Result(True, "ok")
    if tool in ("delete", "read"):
        (path,) = args
        if path not in files:
            return Result(False, f"no such file {path}")
        if tool == "delete":
            del files[path]
            return Result(True, "ok")
        return Result(True, files[path])
    if tool in ENDS_EPISODE:
        return Result(True, "done")
    return Result(False, f"unknown tool {tool}")
