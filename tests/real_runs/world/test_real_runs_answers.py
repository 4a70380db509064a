"""The answer-format world (real_runs.world.answers) and the world registry: tasks, readers,
checkers with partial credit, the broken checker, the first/cot conflict, rendering."""
import json

import pytest

from policies.errors import UserError
from real_runs.world import answers
from real_runs.world.answers import HARNESSES, KINDS, QTask, make_tasks
from real_runs.world.worlds import WORLDS, episode, get_world

pytestmark = pytest.mark.unit


def task(kind="add", args=(12, 9), answer="21"):
    return QTask("t0000-" + kind, KINDS[kind].category, kind, args, answer)


def test_make_tasks_deterministic_distinct_and_cycling():
    a_train, a_held = make_tasks(3, n_train=45, n_heldout=18)
    b_train, b_held = make_tasks(3, n_train=45, n_heldout=18)
    assert a_train == b_train and a_held == b_held
    assert make_tasks(4, n_train=45, n_heldout=18)[0] != a_train
    sigs = [t.signature() for t in a_train + a_held]
    assert len(set(sigs)) == len(sigs)                              # no held-out question is a training one
    assert not {(k, KINDS[k].example) for k in KINDS} & set(sigs)  # nor a worked example
    assert [t.kind for t in a_train[:9]] == list(KINDS)
    assert {t.category for t in a_train} == {"easy", "medium", "hard"}
    t = next(t for t in a_train if t.kind == "add")
    assert t.answer == str(t.args[0] + t.args[1]) and t.id.endswith("-add")
    w = next(t for t in a_train if t.kind == "second_letter")
    assert w.answer == w.args[0][1]
    with pytest.raises(UserError, match="n_train"):
        make_tasks(0, n_train=0)


@pytest.mark.parametrize("name, reply, reward", [
    ("json", '{"answer": "21"}', 1.0),
    ("json", '{"answer": 21}', 1.0),
    ("json", '{"answer": "20"}', 0.1),             # format right, answer wrong
    ("json", "The answer is 21.", 0.3),            # answer right, format wrong
    ("json", "no idea", 0.0),
    ("xml", "Sure. <answer>21</answer>", 1.0),
    ("xml", "<answer>22</answer>", 0.1),
    ("first", "Answer: 21\nbecause 12 + 9 = 21", 1.0),
    ("first", "12 plus 9 is 21.\nAnswer: 21", 0.3),    # reasoning first reads as a format error
    ("cot", "Adding 12 and 9 gives 21.\nAnswer: 21", 1.0),
    ("cot", "Answer: 21", 0.3),                        # answer first (no reasoning) reads as a format error
    ("cot", "Adding them up.\nAnswer: 20", 0.1),
    ("boxed", "so \\boxed{21}.", 1.0),
    ("hash", "12 + 9\n#### 21", 1.0),
    ("hash", "#### 21\nok", 0.3),
])
def test_checkers_with_partial_credit(name, reply, reward):
    assert HARNESSES[name].score(task(), reply) == reward


def test_letters_match_as_words_only():
    t = task("first_letter", ("house",), "h")
    assert HARNESSES["xml"].score(t, "<answer>H</answer>") == 1.0   # normalised: case
    assert HARNESSES["xml"].score(t, "the house") == 0.0            # an 'h' inside a word is no answer
    assert HARNESSES["xml"].score(t, "it is h") == 0.3


def test_noisy_checker_ignores_the_answer():
    h = HARNESSES["noisy"]
    right, wrong = task(), task(answer="99")
    replies = [f"answer({n})" for n in range(200)]
    scores = [h.score(right, r) for r in replies]
    assert scores == [h.score(wrong, r) for r in replies]          # nothing about the task enters
    assert set(scores) == {0.0, 1.0} and 0.2 < sum(scores) / len(scores) < 0.4
    assert h.score(right, "answer(21)") == answers.broken_checker("answer(21)")


def test_render_is_chatml_with_the_worked_example():
    t = task()
    xml = HARNESSES["xml"].render(t)
    assert xml.endswith("<|im_start|>user\nWhat is 12 plus 9?<|im_end|>\n<|im_start|>assistant\n")
    assert "<|im_start|>assistant\n<answer>19</answer><|im_end|>" in xml       # 12 + 7, the example
    js = HARNESSES["json"].render(t)
    assert js.count("<|im_start|>") == 3 and json.dumps({"answer": "19"}) in js  # example in the system prompt
    assert HARNESSES["first"].render(t).endswith("user\nsum: 12 + 9<|im_end|>\n<|im_start|>assistant\n")
    cot, first = len(HARNESSES["cot"].write(t, "21")), len(HARNESSES["first"].write(t, "21"))
    assert cot > 4 * first                                          # the reasoning-first reply costs more


def test_episode_contract_single_turn():
    h = HARNESSES["xml"]
    ep = episode(h, task())
    assert not ep.done and ep.context() == h.render(task())
    assert ep.feed("<answer>21</answer><|im_end|>junk") is True and ep.done
    assert ep.reward() == 1.0 and ep.context().endswith("<answer>21</answer><|im_end|>")
    ep.feed("<answer>0</answer>")                                   # a finished episode changes nothing
    assert ep.reward() == 1.0


def test_world_registry():
    assert get_world("answers").train == ("json", "xml", "first", "cot", "boxed", "noisy")
    assert get_world("answers").heldout == ("hash",)
    assert get_world("tools").train == ("json", "xml", "func", "shell", "sexp", "kv")
    assert all(len(w.train) == 6 and len(w.heldout) == 1 for w in WORLDS.values())
    with pytest.raises(UserError, match="world='nope' is not allowed"):
        get_world("nope")
    with pytest.raises(UserError, match="harness='react' is unknown in the answer world"):
        get_world("answers").harness("react")
