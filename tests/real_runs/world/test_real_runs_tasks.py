"""The task world: tasks, checkers, harnesses, episodes (real_runs.world.tasks/harnesses/episode)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from real_runs.world.episode import Episode
from real_runs.world.harnesses import HARNESSES, HELDOUT_HARNESSES, STOP, TRAIN_HARNESSES
from real_runs.world.tasks import CATEGORIES, Task, make_tasks
from real_runs.world.workspace import Call

TRAIN, HELDOUT = make_tasks(0)
ALL = TRAIN + HELDOUT


def run_demo(h, task):
    ep = Episode(h, task)
    for completion in h.demonstration(task):
        assert not ep.done
        ep.feed(completion)
    return ep


# ----------------------------------------------------------------- task set
def test_sizes_and_categories():
    assert len(TRAIN) == 300 and len(HELDOUT) == 100
    assert len(CATEGORIES) >= 5
    for split in (TRAIN, HELDOUT):
        counts = {c: sum(t.category == c for t in split) for c in CATEGORIES}
        assert min(counts.values()) >= len(split) // len(CATEGORIES)
    assert len({t.id for t in ALL}) == 400


def test_make_tasks_is_deterministic_and_seed_dependent():
    again = make_tasks(0)
    assert again == (TRAIN, HELDOUT)
    other = make_tasks(1)
    assert other[0] != TRAIN
    # the training set does not depend on how many held-out tasks are asked for
    assert make_tasks(0, n_train=300, n_heldout=10)[0] == TRAIN


def test_heldout_disjoint_from_train():
    train_sigs = {t.signature() for t in TRAIN}
    assert not any(t.signature() in train_sigs for t in HELDOUT)
    assert len({t.signature() for t in ALL}) == len(ALL)


@pytest.mark.parametrize("kwargs, field", [
    ({"seed": -1}, "seed"), ({"seed": 0, "n_train": 0}, "n_train"),
    ({"seed": 0, "n_heldout": 1.5}, "n_heldout"), ({"seed": "0"}, "seed"),
    ({"seed": 0, "n_train": 10**6}, "n_train"),
])
def test_make_tasks_rejects_bad_arguments(kwargs, field):
    with pytest.raises(ValueError, match=field):
        make_tasks(**kwargs)


def test_doing_nothing_scores_zero():
    for t in ALL:
        assert t.score(t.workspace(), None) == 0.0, t


def test_contents_are_short():
    for t in ALL:
        assert len(t.files) <= 5
        assert all(len(name) <= 6 and len(text) <= 24 for name, text in t.files)
        assert len(t.instruction) <= 60


# ----------------------------------------------------------------- checker, by hand
def _task(**kw):
    base = dict(id="x", category="files", instruction="", files=(("a", "x"), ("b", "y")))
    return Task(**{**base, **kw})


def test_partial_credit_file_goals():
    rename = _task(goal=(("a", None), ("c", "x")))
    assert rename.score({"b": "y", "c": "x"}, None) == 1.0          # renamed
    assert rename.score({"a": "x", "b": "y", "c": "x"}, None) == 0.5  # copied instead
    assert rename.score({"b": "y", "c": "z"}, None) == 0.75         # renamed, wrong text
    assert rename.score({"c": "x"}, None) == 0.5                    # collateral: b deleted
    assert rename.score({"a": "x", "b": "y"}, None) == 0.0          # nothing done
    create = _task(category="create", goal=(("c", "sun"),))
    assert create.score({"a": "x", "b": "y", "c": "sun"}, None) == 1.0
    assert create.score({"a": "x", "b": "y", "c": "sun\nsun"}, None) == 0.5  # wrong content
    assert create.score({"a": "x", "b": "y", "d": "sun"}, None) == 0.0      # wrong file...
    # ...and the stray file is collateral too, so wrong file + right file = 1 * 0.5
    assert create.score({"a": "x", "b": "y", "c": "sun", "d": "sun"}, None) == 0.5
    assert create.score({"a": "x", "b": "y", "c": "sun"}, "junk") == 1.0    # answer ignored
    edit = _task(category="edit", goal=(("a", "x\nsun"),))
    assert edit.score({"a": "x\nsun", "b": "y"}, None) == 1.0
    assert edit.score({"a": "x", "b": "y"}, None) == 0.0              # untouched: no credit
    assert edit.score({"a": "sun", "b": "y"}, None) == 0.5            # overwrote instead
    assert edit.score({"a": "x\nsun\nsun", "b": "y"}, None) == 0.5    # appended twice


def test_answer_goals():
    count = _task(category="count", answer="3")
    ws = {"a": "x", "b": "y"}
    for good in ("3", " 3", '"3"', "3.", "'3' "):
        assert count.score(ws, good) == 1.0
    for bad in (None, "4", "three", "", "33"):
        assert count.score(ws, bad) == 0.0
    assert count.score({"a": "x"}, "3") == 0.5   # right answer, but deleted a file
    lookup = _task(category="lookup", answer="Red")
    assert lookup.score(ws, "red") == 1.0


# ----------------------------------------------------------------- harness registry
def test_registry():
    assert len(TRAIN_HARNESSES) >= 6 and len(HELDOUT_HARNESSES) >= 1
    assert not set(TRAIN_HARNESSES) & set(HELDOUT_HARNESSES)
    assert set(TRAIN_HARNESSES) | set(HELDOUT_HARNESSES) <= set(HARNESSES)
    loops = {HARNESSES[n].loop for n in TRAIN_HARNESSES}
    assert loops == {"single", "multi"}
    for name, h in HARNESSES.items():
        assert h.name == name and h.stop == STOP
        # a different notation for every harness: demonstrations of one task all differ
    demos = {tuple(HARNESSES[n].demonstration(TRAIN[6])) for n in HARNESSES}
    assert len(demos) == len(HARNESSES)
    schemas = {HARNESSES[n].syntax.schema for n in HARNESSES}
    assert len(schemas) == len(HARNESSES)


@pytest.mark.parametrize("name", list(HARNESSES))
def test_demonstrations_solve_every_task(name):
    h = HARNESSES[name]
    seen = set()
    for t in ALL:
        ep = run_demo(h, t)
        assert ep.done and ep.reward() == 1.0, (name, t, ep.context())
        assert ep.parse_failures == 0 and ep.tool_errors == 0
        assert ep.turns <= h.max_turns
        seen.add(t.category)
        for c in h.demonstration(t):
            assert c.endswith(h.stop) and c.count(h.stop) == 1
    assert seen == set(CATEGORIES)


@pytest.mark.parametrize("name", list(HARNESSES))
def test_demonstration_parses_back_to_the_plan(name):
    h = HARNESSES[name]
    for t in ALL[:60]:
        parsed = []
        for c in h.demonstration(t):
            parsed += h.parse_turn(c[: -len(h.stop)])
        assert parsed == h.plan(t)


def test_context_lengths_are_short():
    report = {}
    for name, h in HARNESSES.items():
        prompts, finals, turns = [], [], []
        for t in ALL:
            prompts.append(len(Episode(h, t).context()))
            finals.append(len(run_demo(h, t).context()))
            turns += [len(c) for c in h.demonstration(t)]
        report[name] = (max(prompts), max(finals), max(turns))
        assert 100 <= min(prompts) and max(prompts) <= 400, (name, report[name])
        assert max(finals) <= 480 and max(turns) <= 80, (name, report[name])
    print("\nmax bytes (prompt, full demo context, completion):", report)


# ----------------------------------------------------------------- episodes and bad input
def test_context_layout_multi_turn():
    h = HARNESSES["shell"]
    t = next(t for t in TRAIN if t.category == "lookup")
    ep = Episode(h, t)
    prompt = ep.context()
    assert prompt == h.render(t) and prompt.endswith("$ ")
    path = t.solution[0].args[0]
    assert not ep.feed(f"cat {path}\nJUNK AFTER STOP")
    text = dict(t.files)[path]
    assert ep.context() == prompt + f"cat {path}\n" + text + "\n$ "
    assert ep.feed(f"answer {t.answer}") and ep.reward() == 1.0
    assert ep.context().endswith(f"answer {t.answer}\n")
    assert ep.feed("rm x\n") and ep.turns == 2   # feeding a finished episode is a no-op


def test_error_observation_then_recovery():
    h = HARNESSES["json"]
    t = next(t for t in TRAIN if t.category == "create")
    ep = Episode(h, t)
    assert not ep.feed('{"tool":"write","path":')           # truncated
    assert ep.parse_failures == 1 and ep.context().endswith(h.error + h.prefix)
    assert not ep.feed('{"tool":"read","path":"zz.txt"}\n')  # tool error, not a parse error
    assert ep.tool_errors == 1 and ep.parse_failures == 1
    assert '"ok":false' in ep.context()
    for c in h.demonstration(t):
        ep.feed(c)
    assert ep.done and ep.reward() == 1.0 and ep.turns == 4


def test_turn_limit_ends_multi_turn_episode():
    h = HARNESSES["func"]
    ep = Episode(h, TRAIN[0])
    for i in range(h.max_turns):
        assert ep.feed("junk") == (i == h.max_turns - 1)
    assert ep.done and ep.reward() == 0.0 and ep.parse_failures == h.max_turns


def test_single_turn_runs_valid_prefix_then_stops():
    h = HARNESSES["sexp"]
    t = next(t for t in TRAIN if t.category == "multi" and t.solution[0].tool == "copy")
    first = h.syntax.format(t.solution[0])
    ep = Episode(h, t)
    assert ep.feed(first + ' (append "') and ep.parse_failures == 1
    assert ep.reward() == 0.5       # the copy happened, the append did not: wrong text


WRONG = [
    ("json", '{"tool":"wrte","path":"a","text":"x"}'), ("json", '{"tool":"write","path":"a"}'),
    ("json", '{"tool":"write","path":"a","text":"x","z":1}'), ("json", "[1,2]"),
    ("xml", '<write path="a">x</writ>'), ("xml", "<finish>"), ("func", 'write_file("a")'),
    ("func", "write_file(a, x)"), ("shell", "echo x"), ("shell", "echo 'x > a"),
    ("shell", "sudo rm a"), ("sexp", '(put "a" "x"'), ("kv", "tool=write path=a"),
    ("kv", "tool=write path=a path=b text=x"), ("react", "Write(a, x)"), ("react", "write[a, x]"),
]


@pytest.mark.parametrize("name, text", WRONG)
def test_wrong_calls_are_parse_failures(name, text):
    h = HARNESSES[name]
    assert h.parse_turn(text)[-1] is None
    for t in TRAIN[:12]:                       # two tasks of every category
        ep = Episode(h, t)
        ep.feed(text)
        assert ep.parse_failures == 1 and ep.files == t.workspace()
        while not ep.feed(text + h.stop):
            pass
        assert ep.reward() == 0.0 and ep.parse_failures == h.max_turns
        assert ep.context().count(h.error) >= h.max_turns - 1


@pytest.mark.parametrize("name", list(HARNESSES))
def test_fuzz_never_raises(name):
    """Random bytes, truncated and spliced demonstrations, other harnesses' syntax."""
    h = HARNESSES[name]
    rng = np.random.default_rng(7)
    others = [HARNESSES[o] for o in HARNESSES if o != name]
    for i, t in enumerate(ALL[:120]):
        ep = Episode(h, t)
        while not ep.done:
            kind = rng.integers(4)
            demo = h.demonstration(t)[min(ep.turns, len(h.demonstration(t)) - 1)]
            if kind == 0:
                text = bytes(rng.integers(0, 256, size=rng.integers(0, 80))).decode("latin-1")
            elif kind == 1:
                text = demo[: rng.integers(0, len(demo))]
            elif kind == 2:
                j = rng.integers(0, len(demo))
                text = demo[:j] + chr(int(rng.integers(32, 127))) + demo[j + 1:]
            else:
                text = others[i % len(others)].demonstration(t)[0]
            ep.feed(text)
            r = ep.reward()
            assert 0.0 <= r <= 1.0
        assert isinstance(ep.context(), str)


def test_wrong_file_gets_partial_or_zero_through_episode():
    h = HARNESSES["kv"]
    t = next(t for t in TRAIN if t.category == "create" and t.instruction.startswith("Create"))
    path, word = t.solution[0].args
    other = "ww" if word != "ww" else "vv"
    ep = Episode(h, t)
    ep.feed(f"tool=write path={path} text={other}")
    assert ep.done and ep.reward() == 0.5


def test_harness_validation():
    with pytest.raises(ValueError, match="loop"):
        dataclasses.replace(HARNESSES["json"], loop="parallel")
    with pytest.raises(ValueError, match="max_turns"):
        dataclasses.replace(HARNESSES["xml"], max_turns=3)


def test_calls_are_recorded():
    h = HARNESSES["react"]
    t = next(t for t in TRAIN if t.category == "files" and t.instruction.startswith("Delete"))
    ep = run_demo(h, t)
    assert ep.calls == [(Call("delete", t.solution[0].args), True), (Call("finish"), True)]


def test_benchmark_episode_throughput(benchmark):
    """Render, parse, execute and score the demonstration episodes of 100 tasks x 7 harnesses."""
    pairs = [(HARNESSES[n], t) for n in HARNESSES for t in ALL[:100]]

    def go():
        total = 0.0
        for h, t in pairs:
            ep = Episode(h, t)
            for c in h.demonstration(t):
                ep.context()
                ep.feed(c)
            total += ep.reward()
        return total

    assert benchmark(go) == len(pairs)


def test_seed_zero_is_pinned():
    """The generator's output is part of the experiment: pin the first tasks of seed 0."""
    t0, t4, h0 = TRAIN[0], TRAIN[4], HELDOUT[0]
    assert (t0.id, t0.instruction, t0.files) == (
        "t0000-create", "Create fu.txt containing ice.", (("pi.txt", "cat"),))
    assert (t4.instruction, t4.files, t4.answer) == (
        "Give the value of row from ni.log.",
        (("ni.log", "max=24\nrow=19\nmin=41"), ("vu.md", "row=87\nmax=88")), "19")
    assert (h0.id, h0.instruction, h0.goal) == (
        "h0000-create", "Make a file sa.md with the text owl.", (("sa.md", "owl"),))


def test_context_layout_of_a_multi_turn_episode():
    h = HARNESSES["json"]
    t = TRAIN[4]                      # lookup: read, then answer
    first, second = h.demonstration(t)
    ep = run_demo(h, t)
    assert ep.context() == h.render(t) + first + '{"ok":true,"out":"max=24\\nrow=19\\nmin=41"}\n> ' + second
    # a truncated completion is stored with the stop marker added
    ep = Episode(h, t)
    ep.feed('{"tool":"re')
    assert ep.context().startswith(h.render(t) + '{"tool":"re\n') and ep.parse_failures == 1


def test_overlong_reply():
    from real_runs.world.harnesses import MAX_REPLY
    h = HARNESSES["shell"]
    long_ok = "echo " + "a" * 40 + " > b.md"
    assert h.parse_turn(long_ok) == [Call("write", ("b.md", "a" * 40))]
    assert h.parse_turn("echo " + "a" * MAX_REPLY + " > b.md") == [None]


def test_shell_quoting_and_tokens():
    sh = HARNESSES["shell"].syntax
    assert sh.parse("echo 'a b' > x.md") == Call("write", ("x.md", "a b"))
    assert sh.parse('  cp "x.md"   y.md ') == Call("copy", ("x.md", "y.md"))
    assert sh.parse("exit") == Call("finish")
    assert sh.parse("answer 7") == Call("answer", ("7",))
    for bad in ("", "cp x.md", "cp 'x.md y.md", "mv a'b' c", "echo a > b c", "exit now"):
        assert sh.parse(bad) is None, bad
    assert sh.format(Call("write", ("x.md", "a b"))) == "echo 'a b' > x.md"


@pytest.mark.parametrize("name", list(HARNESSES))
def test_every_tool_round_trips(name):
    syn = HARNESSES[name].syntax
    for call in (Call("write", ("a.md", "sun")), Call("append", ("a.md", "red")),
                 Call("move", ("a.md", "b.txt")), Call("copy", ("a.md", "b.txt")),
                 Call("delete", ("a.md",)), Call("read", ("a.md",)), Call("answer", ("42",)),
                 Call("finish")):
        assert syn.parse(syn.format(call)) == call, (name, syn.format(call))


@pytest.mark.parametrize("name", list(HARNESSES))
def test_unknown_tool_name_fails(name):
    syn = HARNESSES[name].syntax
    shell = {"write": "echo", "read": "cat", "finish": "exit"}
    for call in (Call("write", ("a.md", "x")), Call("read", ("a.md",)), Call("finish")):
        text = syn.format(call)
        surface = shell[call.tool] if name == "shell" else syn.names[call.tool]
        assert surface in text
        assert syn.parse(text.replace(surface, "zap", 1)) is None, (name, text)


def test_prompt_hides_contents_only_where_the_harness_does():
    t = TRAIN[4]                  # lookup of row in ni.log: max=24 row=19 min=41
    for name, h in HARNESSES.items():
        prompt = h.render(t)
        assert t.instruction in prompt and "ni.log" in prompt and "vu.md" in prompt
        assert ("19" in prompt) == h.show_contents, name


def test_single_turn_call_limit():
    h = HARNESSES["kv"]
    one = "tool=show path=a"
    assert h.parse_turn(" ; ".join([one] * h.max_calls))[-1] is not None
    assert h.parse_turn(" ; ".join([one] * (h.max_calls + 1)))[-1] is None


def test_workspace_execute_by_hand():
    from real_runs.world.workspace import MAX_FILES, execute
    ws = {"a": "x"}
    assert execute(ws, Call("append", ("a", "y"))) == (True, "ok") and ws == {"a": "x\ny"}
    assert execute(ws, Call("append", ("n", "z"))).ok and ws["n"] == "z"   # append creates
    assert execute(ws, Call("write", ("n", ""))).ok and ws["n"] == ""
    assert execute(ws, Call("append", ("n", "q"))).ok and ws["n"] == "q"   # no blank first line
    assert execute(ws, Call("move", ("a", "n"))).ok and ws == {"n": "x\ny"}  # move overwrites
    assert execute(ws, Call("read", ("n",))) == (True, "x\ny")
    before = dict(ws)
    for bad in (Call("read", ("zz",)), Call("delete", ("zz",)), Call("copy", ("zz", "b")),
                Call("write", ("a b", "x")), Call("write", ("d/e", "x")), Call("write", ("", "x")),
                Call("write", ("c", "x" * 65)), Call("copy", ("n", "q<")), Call("zap", ())):
        r = execute(ws, bad)
        assert not r.ok and ws == before, bad
    full = {f"f{i}": "" for i in range(MAX_FILES)}
    assert not execute(full, Call("write", ("new", "x"))).ok and len(full) == MAX_FILES
    assert execute(full, Call("write", ("f0", "x"))).ok


def test_kv_and_bracket_values():
    kv = HARNESSES["kv"].syntax
    assert kv.parse('tool=write path=a.md text="two words"') == Call("write", ("a.md", "two words"))
    assert kv.parse("  path=a.md   tool=show ") == Call("read", ("a.md",))   # any order
    for bad in ('tool=write path=a.md text="two', "tool=show path=a.md extra=1", "tool=show",
                "tool=show path=a.md path=b.md", 'tool=show path="a.md"x', "tool=show, path=a.md"):
        assert kv.parse(bad) is None, bad
    react = HARNESSES["react"].syntax
    assert react.parse("Write[ a.md ,  two words ]") == Call("write", ("a.md", "two words"))
    assert react.parse("Answer[ 3 ]") == Call("answer", ("3",))
    assert react.parse("Finish[ ]") == Call("finish")
    xml = HARNESSES["xml"]
    assert xml.parse_turn('<write path="a.md">x y</write>  <finish/>') == [
        Call("write", ("a.md", "x y")), Call("finish")]
    assert xml.parse_turn('<write path="a.md">x</write> junk') == [Call("write", ("a.md", "x")), None]
