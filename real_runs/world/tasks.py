"""Agentic tool-use tasks on a small in-memory workspace, generated from a seed.

No network, no data sets: every task is drawn from small built-in vocabularies by a
``np.random.Generator`` created from the seed, so ``make_tasks(seed)`` is identical on
every machine. File names and contents are a few bytes so rendered contexts stay short
(a tiny byte-level transformer reads them).

Categories (:data:`CATEGORIES`):

``create``  write a new file, or overwrite an existing one, with a given word
``edit``    append a line to an existing file
``files``   rename, copy or delete a file
``count``   answer how many lines a file has, or how many files there are
``lookup``  answer the value of a key in a ``key=value`` file
``multi``   two steps: copy/rename then append, delete then create, or look a value up
            and write it into a file

Reward (:meth:`Task.score`), in [0, 1]:

* file goals: ``goal`` lists the target paths and their expected final text (``None`` =
  must not exist). A target scores 1 if right; 0.5 if it should exist, exists, and was
  changed but holds the wrong text ("right file, wrong content"); else 0. The reward is
  the mean over targets.
* answer goals: 1 if the normalised answer (stripped, quotes and a final dot removed,
  lower-case) equals the expected one, else 0.
* collateral damage (any non-target file created, changed or deleted) halves the reward.

Doing nothing always scores 0: every task's targets differ from the initial workspace
or it needs an answer.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from policies.errors import UserError
from policies.validate import check_int
from real_runs import streams
from real_runs.world.workspace import Call

CATEGORIES = ("create", "edit", "files", "count", "lookup", "multi")

_CONS = "bdfgklmnprstvz"
_VOWELS = "aeiou"
_EXTS = ("txt", "md", "log")
WORDS = (
    "red", "sun", "cat", "map", "zip", "owl", "fig", "ink", "jam", "kit", "log", "mud",
    "nut", "oak", "pen", "rug", "sky", "tea", "urn", "van", "web", "yak", "axe", "bee",
    "cow", "dew", "elm", "fox", "gem", "hat", "ice", "jet", "key", "lid", "mop", "net",
    "orb", "pig", "rye", "sea", "toy", "wax",
)
KEYS = ("id", "max", "min", "port", "size", "day", "cap", "pin", "row", "top")


@dataclass(frozen=True)
class Task:
    """One task instance.

    ``files``: the initial workspace as sorted ``(name, text)`` pairs;
    ``goal``: ``(path, expected_text_or_None)`` pairs (file goals; empty for answers);
    ``answer``: the expected answer or None; ``solution``: canonical calls that solve
    it, including the ``read`` calls an agent that cannot see file contents needs.
    """

    id: str
    category: str
    instruction: str
    files: tuple[tuple[str, str], ...]
    goal: tuple[tuple[str, str | None], ...] = ()
    answer: str | None = None
    solution: tuple[Call, ...] = ()

    def workspace(self) -> dict[str, str]:
        """A fresh, mutable copy of the initial workspace."""
        return dict(self.files)

    def score(self, files: dict[str, str], answer: str | None) -> float:
        """Reward in [0, 1] of a final workspace ``files`` and final ``answer``."""
        initial = dict(self.files)
        targets = dict(self.goal)
        collateral = any(
            initial.get(p) != files.get(p)
            for p in initial.keys() | files.keys() if p not in targets
        )
        if self.answer is not None:
            base = 1.0 if answer is not None and normalise(answer) == normalise(self.answer) else 0.0
        else:
            parts = []
            for path, want in targets.items():
                have = files.get(path)
                changed = have is not None and have != initial.get(path)
                parts.append(1.0 if have == want else 0.5 if want is not None and changed else 0.0)
            base = sum(parts) / len(parts)
        return base * 0.5 if collateral else base

    def signature(self) -> tuple:
        """What makes two tasks the same instance (id and category excluded)."""
        return (self.instruction, self.files)


def normalise(text: str) -> str:
    """Answer normalisation used by the checker."""
    return text.strip().strip("\"'`").strip().rstrip(".").strip().lower()


# ---------------------------------------------------------------- vocabulary draws
def _name(rng: np.random.Generator, taken: set[str]) -> str:
    while True:
        stem = _CONS[rng.integers(len(_CONS))] + _VOWELS[rng.integers(len(_VOWELS))]
        name = f"{stem}.{_EXTS[rng.integers(len(_EXTS))]}"
        if name not in taken:
            taken.add(name)
            return name


def _word(rng: np.random.Generator, avoid: str | None = None) -> str:
    while True:
        w = WORDS[rng.integers(len(WORDS))]
        if w != avoid:
            return w


def _lines(rng: np.random.Generator, lo: int, hi: int) -> str:
    return "\n".join(_word(rng) for _ in range(int(rng.integers(lo, hi + 1))))


def _kv_text(rng: np.random.Generator, n: int) -> tuple[str, list[tuple[str, str]]]:
    keys = rng.choice(len(KEYS), size=n, replace=False)
    pairs = [(KEYS[k], str(int(rng.integers(1, 100)))) for k in keys]
    return "\n".join(f"{k}={v}" for k, v in pairs), pairs


def _distractors(rng: np.random.Generator, files: dict, taken: set, lo: int = 1, hi: int = 2):
    for _ in range(int(rng.integers(lo, hi + 1))):
        files[_name(rng, taken)] = _word(rng)


# instruction kind -> paraphrases (one is drawn per task)
PHRASES: dict[str, tuple[str, ...]] = {
    "create": ("Create {p} containing {w}.", "Make a file {p} with the text {w}."),
    "overwrite": ("Overwrite {p} with {w}.", "Replace the text of {p} by {w}."),
    "append": ("Append the line {w} to {p}.", "Add {w} as a new last line of {p}."),
    "delete": ("Delete {a}.", "Remove the file {a}."),
    "rename": ("Rename {a} to {b}.", "Move {a} to {b}."),
    "copy": ("Copy {a} to {b}.", "Duplicate {a} as {b}."),
    "count_files": ("How many files are there?", "Count the files."),
    "count_lines": ("How many lines are in {p}?", "Count the lines of {p}."),
    "lookup": ("What is {k} in {p}?", "Give the value of {k} from {p}."),
    "lookup_write": ("Write {k} from {a} into {b}.", "Put the {k} value of {a} in a new file {b}."),
    "copy_append": ("Copy {a} to {b}, then append {w} to {b}.",
                    "Duplicate {a} as {b} and add the line {w} to {b}."),
    "rename_append": ("Rename {a} to {b}, then append {w} to it.",
                      "Move {a} to {b} and add the line {w} to it."),
    "delete_create": ("Delete {a} and create {b} with {w}.", "Remove {a}, then make {b} holding {w}."),
}


def _say(rng: np.random.Generator, kind: str, **fields: str) -> str:
    """One paraphrase of instruction ``kind``, filled in."""
    options = PHRASES[kind]
    return options[int(rng.integers(len(options)))].format(**fields)


# ---------------------------------------------------------------- category generators
# each takes (rng, taken: the file names this task has drawn, initially empty) and returns
# (instruction, files, goal, answer, solution)
def _gen_create(rng, taken):
    files: dict[str, str] = {}
    _distractors(rng, files, taken)
    if rng.random() < 0.5:
        path, word = _name(rng, taken), _word(rng)
        instr = _say(rng, "create", p=path, w=word)
    else:
        path = sorted(files)[int(rng.integers(len(files)))]
        word = _word(rng, avoid=files[path])
        instr = _say(rng, "overwrite", p=path, w=word)
    return instr, files, ((path, word),), None, (Call("write", (path, word)),)


def _gen_edit(rng, taken):
    path = _name(rng, taken)
    files = {path: _lines(rng, 1, 2)}
    _distractors(rng, files, taken, 0, 1)
    word = _word(rng)
    instr = _say(rng, "append", p=path, w=word)
    goal = ((path, files[path] + "\n" + word),)
    return instr, files, goal, None, (Call("append", (path, word)),)


def _gen_files(rng, taken):
    src = _name(rng, taken)
    files = {src: _word(rng)}
    _distractors(rng, files, taken, 0, 1)
    kind = int(rng.integers(3))
    if kind == 2:
        instr = _say(rng, "delete", a=src)
        return instr, files, ((src, None),), None, (Call("delete", (src,)),)
    dst = _name(rng, taken)
    if kind == 0:
        instr = _say(rng, "rename", a=src, b=dst)
        return instr, files, ((src, None), (dst, files[src])), None, (Call("move", (src, dst)),)
    instr = _say(rng, "copy", a=src, b=dst)
    return instr, files, ((dst, files[src]),), None, (Call("copy", (src, dst)),)


def _gen_count(rng, taken):
    files: dict[str, str] = {}
    if rng.random() < 0.3:
        _distractors(rng, files, taken, 1, 4)
        n = str(len(files))
        return _say(rng, "count_files"), files, (), n, (Call("answer", (n,)),)
    path = _name(rng, taken)
    files[path] = _lines(rng, 1, 5)
    _distractors(rng, files, taken, 0, 1)
    n = str(files[path].count("\n") + 1)
    sol = (Call("read", (path,)), Call("answer", (n,)))
    return _say(rng, "count_lines", p=path), files, (), n, sol


def _gen_lookup(rng, taken):
    path = _name(rng, taken)
    text, pairs = _kv_text(rng, int(rng.integers(2, 4)))
    files = {path: text}
    if rng.random() < 0.5:
        files[_name(rng, taken)] = _kv_text(rng, 2)[0]
    key, value = pairs[int(rng.integers(len(pairs)))]
    sol = (Call("read", (path,)), Call("answer", (value,)))
    return _say(rng, "lookup", k=key, p=path), files, (), value, sol


def _gen_multi(rng, taken):
    src = _name(rng, taken)
    kind = int(rng.integers(4))
    if kind == 3:
        text, pairs = _kv_text(rng, 2)
        files = {src: text}
        dst = _name(rng, taken)
        key, value = pairs[int(rng.integers(2))]
        sol = (Call("read", (src,)), Call("write", (dst, value)))
        return _say(rng, "lookup_write", k=key, a=src, b=dst), files, ((dst, value),), None, sol
    files = {src: _word(rng)}
    _distractors(rng, files, taken, 0, 1)
    dst, word = _name(rng, taken), _word(rng)
    if kind == 0:
        goal = ((dst, files[src] + "\n" + word),)
        sol = (Call("copy", (src, dst)), Call("append", (dst, word)))
        return _say(rng, "copy_append", a=src, b=dst, w=word), files, goal, None, sol
    if kind == 1:
        goal = ((src, None), (dst, files[src] + "\n" + word))
        sol = (Call("move", (src, dst)), Call("append", (dst, word)))
        return _say(rng, "rename_append", a=src, b=dst, w=word), files, goal, None, sol
    goal = ((src, None), (dst, word))
    sol = (Call("delete", (src,)), Call("write", (dst, word)))
    return _say(rng, "delete_create", a=src, b=dst, w=word), files, goal, None, sol


GENERATORS = {
    "create": _gen_create, "edit": _gen_edit, "files": _gen_files,
    "count": _gen_count, "lookup": _gen_lookup, "multi": _gen_multi,
}
assert tuple(GENERATORS) == CATEGORIES


MAX_TASKS = 100_000


def make_tasks(seed: int, n_train: int = 300, n_heldout: int = 100) -> tuple[list[Task], list[Task]]:
    """Training and held-out tasks, deterministic from ``seed``.

    Categories cycle in :data:`CATEGORIES` order, so each split is balanced. Held-out
    tasks are distinct instances (different instruction or files) from every training
    task. Training tasks do not depend on ``n_heldout``. Ids: ``t0007-count``,
    ``h0012-lookup``.
    """
    seed = check_int("seed", seed, 0)
    n_train = check_int("n_train", n_train, 1, MAX_TASKS)
    n_heldout = check_int("n_heldout", n_heldout, 0, MAX_TASKS - n_train)
    rng = streams.rng(seed, streams.TASKS)

    def draw(prefix: str, i: int) -> Task:
        cat = CATEGORIES[i % len(CATEGORIES)]
        instr, files, goal, answer, sol = GENERATORS[cat](rng, set())
        return Task(f"{prefix}{i:04d}-{cat}", cat, instr, tuple(sorted(files.items())), tuple(goal), answer,
                    tuple(sol))

    train, heldout = distinct_splits(
        n_train, n_heldout, draw, Task.signature, set(),
        lambda what, n: f"{what}={n} is too large: the vocabularies cannot supply that many distinct tasks")
    return train, heldout


def distinct_splits(n_train: int, n_heldout: int, draw, key, seen: set, too_many) -> tuple[list, list]:
    """The training then held-out items of a task world: item i of a split is `draw(prefix, i)`
    (prefix "t" or "h"), drawn again while its `key` is in `seen` (so no item repeats across
    the splits); UserError `too_many("n_train" | "n_heldout", n)` after 50 n + 1000 draws."""
    out = []
    for prefix, what, n in (("t", "n_train", n_train), ("h", "n_heldout", n_heldout)):
        items: list = []
        tries = 0
        while len(items) < n:
            tries += 1
            if tries > 50 * n + 1000:
                raise UserError(too_many(what, n))
            item = draw(prefix, len(items))
            if key(item) in seen:
                continue
            seen.add(key(item))
            items.append(item)
        out.append(items)
    return out[0], out[1]
