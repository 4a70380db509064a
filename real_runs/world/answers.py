"""The answer-format world: short questions a small chat model half-knows, asked through
harnesses that differ the way real agent harnesses do. Built for a real language model
(SmolLM2-135M-Instruct, `hb real --preset smollm2-135m`); the byte-level model keeps the
tool-use world (`real_runs.world.tasks`, `harnesses`).

Tasks (`make_tasks(seed, n_train, n_heldout)`), nine types in three categories of graded
difficulty (the category is the task's `category`, the type is in its id):

=========  =======================================================
easy       first letter of a word, the larger of two numbers, n + 1
medium     last letter of a word, the smaller of two numbers, n - 1
hard       a + b (2..30 each), the length of a word, its second letter
=========  =======================================================

Harnesses (`HARNESSES`; training `TRAIN_HARNESSES`, held out `HELDOUT_HARNESSES`). Every
one renders a ChatML conversation (SmolLM2's and Qwen's chat format: `<|im_start|>role\\n
...<|im_end|>`), ends where the assistant writes, and stops at `<|im_end|>`. They differ in
system prompt, where the one worked example sits (an earlier chat turn, inside the system
prompt), the question's wording (plain sentence or terse), where and how the answer is
written, and what a reply costs:

======  ==========================================  =========================================
name    answer convention                           layout / wording / notes
======  ==========================================  =========================================
json    the whole reply is {"answer": X}            example in the system prompt; plain
xml     <answer>X</answer>                          example as a chat turn; plain
first   first line "Answer: X" (answer first)       example as a chat turn; terse
cot     reasoning lines, then last line             example as a chat turn; plain; a reply
        "Answer: X" (reasoning first)               costs ~3-4x the tokens of the others
boxed   \\boxed{X}                                   long system prompt, example in it; terse
noisy   answer(X); its checker is BROKEN: the       example as a chat turn; plain
        reward is a hash of the reply (P = 0.3),
        unrelated to the answer: nothing to learn
hash    last line "#### X" (held out)               example as a chat turn; terse
======  ==========================================  =========================================

`first` and `cot` conflict on purpose: both write "Answer:", one first and alone, the other
last after reasoning; each reads the other's reply as a format error (partial credit).

Reward (`AnswerHarness.score`), in [0, 1]: 1.0 when the harness's reader finds the answer
where its convention puts it and it equals the expected one (normalised as the tool-use
world's answers: `tasks.normalise`); 0.3 when the expected answer stands in the reply as a
word but not where the convention wants it (right answer, wrong format); 0.1 when the
format is right and the answer wrong; else 0. Success = reward 1.0. `noisy` scores 1.0 or 0
by its broken checker only.
"""
from __future__ import annotations

import json
import re
import zlib
from dataclasses import dataclass
from typing import Callable

import numpy as np

from policies.errors import UserError
from policies.validate import check_int
from real_runs import streams
from real_runs.world.tasks import MAX_TASKS, distinct_splits, normalise

STOP = "<|im_end|>"
CATEGORIES = ("easy", "medium", "hard")

WORDS = ("apple", "house", "river", "green", "table", "chair", "music", "light", "water", "stone",
         "bread", "cloud", "dream", "earth", "flame", "glass", "heart", "juice", "knife", "lemon",
         "mouse", "night", "ocean", "paper", "queen", "radio", "smile", "tiger", "uncle", "voice",
         "whale", "youth", "zebra", "candle", "forest", "garden", "island", "jacket", "kitten", "ladder",
         "market", "number", "orange", "pencil", "rabbit", "silver", "tomato", "window", "yellow", "basket",
         "cat", "dog", "sun", "box", "pen", "cup", "hat", "bus", "egg", "map")


@dataclass(frozen=True)
class QTask:
    """One question. `kind`: the task type; `args`: its inputs; `answer`: the expected answer."""

    id: str
    category: str
    kind: str
    args: tuple
    answer: str

    def signature(self) -> tuple:
        return (self.kind, self.args)


@dataclass(frozen=True)
class Kind:
    """A task type: its category, a generator of inputs, the answer, two wordings of the
    question (plain sentence, terse), and the reasoning line a worked `cot` example shows."""

    category: str
    draw: Callable[[np.random.Generator], tuple]
    solve: Callable[[tuple], str]
    plain: str
    terse: str
    reason: str
    example: tuple          # the inputs of the worked example (never drawn as a task)


def _word(rng):
    return (str(WORDS[int(rng.integers(len(WORDS)))]),)


def _two(rng, lo=1, hi=99):
    a, b = (int(x) for x in rng.choice(np.arange(lo, hi + 1), size=2, replace=False))
    return (a, b)


KINDS: dict[str, Kind] = {
    "first_letter": Kind("easy", _word, lambda a: a[0][0], 'What is the first letter of the word "{0}"?',
                         "first letter of: {0}", 'The word "{0}" starts with the letter {ans}.', ("house",)),
    "larger": Kind("easy", _two, lambda a: str(max(a)), "Which number is larger, {0} or {1}?",
                   "larger of: {0}, {1}", "Comparing {0} and {1}, the larger one is {ans}.", (14, 41)),
    "next_number": Kind("easy", lambda rng: (int(rng.integers(1, 99)),), lambda a: str(a[0] + 1),
                        "What number comes right after {0}?", "next after: {0}",
                        "Counting up from {0}, the next number is {ans}.", (27,)),
    "last_letter": Kind("medium", _word, lambda a: a[0][-1], 'What is the last letter of the word "{0}"?',
                        "last letter of: {0}", 'The word "{0}" ends with the letter {ans}.', ("house",)),
    "smaller": Kind("medium", _two, lambda a: str(min(a)), "Which number is smaller, {0} or {1}?",
                    "smaller of: {0}, {1}", "Comparing {0} and {1}, the smaller one is {ans}.", (41, 14)),
    "previous_number": Kind("medium", lambda rng: (int(rng.integers(2, 100)),), lambda a: str(a[0] - 1),
                            "What number comes right before {0}?", "previous of: {0}",
                            "Counting down from {0}, the previous number is {ans}.", (27,)),
    "add": Kind("hard", lambda rng: _two(rng, 2, 30), lambda a: str(a[0] + a[1]), "What is {0} plus {1}?",
                "sum: {0} + {1}", "Adding {0} and {1} gives {ans}.", (12, 7)),
    "length": Kind("hard", _word, lambda a: str(len(a[0])), 'How many letters does the word "{0}" have?',
                   "letters in: {0}", 'Spelling out "{0}" letter by letter gives {ans} letters.', ("house",)),
    "second_letter": Kind("hard", _word, lambda a: a[0][1], 'What is the second letter of the word "{0}"?',
                          "second letter of: {0}", 'The word "{0}" has {ans} as its second letter.', ("house",)),
}
assert all(k.category in CATEGORIES for k in KINDS.values())


def question(kind: str, args: tuple, wording: str) -> str:
    k = KINDS[kind]
    return (k.plain if wording == "plain" else k.terse).format(*args)


# -- readers: where each convention puts the answer (None = not there) --------------------
_ANSWER_LINE = re.compile(r"^\s*answer\s*:\s*(.+?)\s*$", re.I)


def _lines(reply: str) -> list[str]:
    return [line for line in reply.strip().splitlines() if line.strip()]


def read_json(reply: str) -> str | None:
    try:
        obj = json.loads(reply.strip())
    except ValueError:
        return None
    return str(obj["answer"]) if isinstance(obj, dict) and "answer" in obj else None


def read_xml(reply: str) -> str | None:
    m = re.search(r"<answer>(.*?)</answer>", reply, re.S)
    return m.group(1) if m else None


def read_first(reply: str) -> str | None:
    lines = _lines(reply)
    m = _ANSWER_LINE.match(lines[0]) if lines else None
    return m.group(1) if m else None


def read_cot(reply: str) -> str | None:
    """The last line "Answer: X" after at least one reasoning line of three or more words."""
    lines = _lines(reply)
    m = _ANSWER_LINE.match(lines[-1]) if lines else None
    reasoned = any(len(line.split()) >= 3 and not _ANSWER_LINE.match(line) for line in lines[:-1])
    return m.group(1) if m and reasoned else None


def read_boxed(reply: str) -> str | None:
    found = re.findall(r"\\boxed\{([^{}]*)\}", reply)
    return found[-1] if found else None


def read_call(reply: str) -> str | None:
    m = re.search(r"answer\((.*?)\)", reply)
    return m.group(1) if m else None


def read_hash(reply: str) -> str | None:
    lines = _lines(reply)
    m = re.match(r"^\s*####\s*(.+?)\s*$", lines[-1]) if lines else None
    return m.group(1) if m else None


def broken_checker(reply: str) -> float:
    """`noisy`'s checker: 1.0 for about 30% of replies by a hash of the text, whatever it says."""
    return 1.0 if zlib.crc32(reply.strip().encode()) % 10 < 3 else 0.0


@dataclass(frozen=True)
class AnswerHarness:
    """One harness of the answer world. `write(task, answer)` is the reply its convention
    expects (the worked example shows it); `read(reply)` finds the answer where the
    convention puts it; `checker` (optional) replaces the scoring (a broken checker)."""

    name: str
    system: str
    write: Callable[[QTask, str], str]
    read: Callable[[str], str | None]
    layout: str = "turn"       # "turn": the example is an earlier chat turn; "system": inside the system prompt
    wording: str = "plain"     # "plain" or "terse" questions
    checker: Callable[[str], float] | None = None
    stop: str = STOP
    max_turns: int = 1

    def render(self, task: QTask) -> str:
        """The ChatML prompt of `task`, ending where the assistant writes."""
        k = KINDS[task.kind]
        ex = QTask("example", k.category, task.kind, k.example, k.solve(k.example))
        ex_q, q = question(ex.kind, ex.args, self.wording), question(task.kind, task.args, self.wording)
        turn = "<|im_start|>{role}\n{text}<|im_end|>\n"
        if self.layout == "system":
            system = f"{self.system}\n\nExample:\n{ex_q}\n{self.write(ex, ex.answer)}"
            parts = [turn.format(role="system", text=system)]
        else:
            parts = [turn.format(role="system", text=self.system), turn.format(role="user", text=ex_q),
                     turn.format(role="assistant", text=self.write(ex, ex.answer))]
        parts += [turn.format(role="user", text=q), "<|im_start|>assistant\n"]
        return "".join(parts)

    def score(self, task: QTask, reply: str) -> float:
        if self.checker is not None:
            return self.checker(reply)
        found = self.read(reply)
        want = normalise(task.answer)
        if found is not None and normalise(found) == want:
            return 1.0
        if re.search(rf"(?<![\w]){re.escape(want)}(?![\w])", reply.lower()):
            return 0.3
        return 0.1 if found is not None else 0.0

    def episode(self, task: QTask) -> "AnswerEpisode":
        return AnswerEpisode(self, task)


class AnswerEpisode:
    """One single-turn episode: the `real_runs.world.episode.Episode` contract
    (context, feed, done, reward) for the answer world."""

    __slots__ = ("harness", "task", "reply", "done", "_prompt")

    def __init__(self, harness: AnswerHarness, task: QTask):
        self.harness, self.task = harness, task
        self.reply: str | None = None
        self.done = False
        self._prompt = harness.render(task)

    def context(self) -> str:
        return self._prompt if self.reply is None else self._prompt + self.reply + self.harness.stop

    def feed(self, completion: str) -> bool:
        if not self.done:
            self.reply = completion.split(self.harness.stop, 1)[0]
            self.done = True
        return True

    def reward(self) -> float:
        return self.harness.score(self.task, self.reply or "")


def _cot(task: QTask, answer: str) -> str:
    reason = KINDS[task.kind].reason.format(*task.args, ans=answer)
    return f"Reasoning: the question asks for one short answer. {reason}\nAnswer: {answer}"


BOXED_SYSTEM = ("You are a careful assistant that answers short questions about words and numbers. "
                "Read the question, work out the answer, and make sure it is exactly one word or one number. "
                "Write the final answer inside \\boxed{}, as in the example, because an automatic grader "
                "only reads what is inside the box. Do not add units or explanations inside the box.")

HARNESSES: dict[str, AnswerHarness] = {h.name: h for h in (
    AnswerHarness("json", 'Reply with one JSON object {"answer": ...} and nothing else.',
                  lambda t, a: json.dumps({"answer": a}), read_json, layout="system"),
    AnswerHarness("xml", "Put your answer between <answer> and </answer> tags.",
                  lambda t, a: f"<answer>{a}</answer>", read_xml),
    AnswerHarness("first", "Give the answer first, on the first line, as: Answer: <answer>",
                  lambda t, a: f"Answer: {a}", read_first, wording="terse"),
    AnswerHarness("cot", "Explain your reasoning first, then give the answer on the last line, as: Answer: <answer>",
                  _cot, read_cot),
    AnswerHarness("boxed", BOXED_SYSTEM, lambda t, a: f"The answer is \\boxed{{{a}}}.", read_boxed,
                  layout="system", wording="terse"),
    AnswerHarness("noisy", "Call the function answer(...) with your answer.",
                  lambda t, a: f"answer({a})", read_call, checker=broken_checker),
    AnswerHarness("hash", "Write your final answer on the last line after ####.",
                  lambda t, a: f"#### {a}", read_hash, wording="terse"),
)}

TRAIN_HARNESSES: list[str] = ["json", "xml", "first", "cot", "boxed", "noisy"]
HELDOUT_HARNESSES: list[str] = ["hash"]


def get_harness(name: str) -> AnswerHarness:
    try:
        return HARNESSES[name]
    except (KeyError, TypeError):
        raise UserError(f"harness={name!r} is unknown in the answer world: allowed are {sorted(HARNESSES)}") from None


def make_tasks(seed: int, n_train: int = 300, n_heldout: int = 100) -> tuple[list[QTask], list[QTask]]:
    """Training and held-out questions, deterministic from `seed`, the types cycling in
    KINDS order; no held-out question equals a training one, no task equals a worked
    example. Ids: ``t0007-add``, ``h0012-length``."""
    seed = check_int("seed", seed, 0)
    n_train = check_int("n_train", n_train, 1, MAX_TASKS)
    n_heldout = check_int("n_heldout", n_heldout, 0, MAX_TASKS - n_train)
    rng = streams.rng(seed, streams.TASKS, 2)
    kinds = list(KINDS)

    def draw(prefix: str, i: int) -> QTask:
        name = kinds[i % len(kinds)]
        k = KINDS[name]
        args = k.draw(rng)
        return QTask(f"{prefix}{i:04d}-{name}", k.category, name, args, k.solve(args))

    return distinct_splits(
        n_train, n_heldout, draw, lambda q: (q.kind, q.args), {(name, k.example) for name, k in KINDS.items()},
        lambda what, n: f"{what}={n} is too large: the answer world cannot supply that many distinct questions")
