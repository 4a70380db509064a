"""The doors for a user's own policies and scenarios (docs/EXTENDING.md), and the page itself:
its example files are the ones in examples/, and every console command on it runs (in this
process, one worker) and prints the output shown there.

A command's expected output is the lines after its `$ ` line: each must appear in the output
in that order; a line ending in ` ...` matches a line that starts with what comes before; a
line `...` stands for any lines. An `error:` line means the command exits 2 with it on stderr.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import hbsim.cli
import hbsim.scenarios as scenarios
from ablations import runner
from ablations.spec import SpecError, load_spec
from policies import registry
from policies.base import Policy
from policies.errors import UserError
from policies.registry import POLICIES, Registry, register
from policies.simple import Uniform

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "EXTENDING.md"
EXAMPLES = REPO / "examples"
EXAMPLE_FILES = ("my_policy.py", "my_scenario.toml", "my_grid.toml")


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every ``` block of a markdown text."""
    return re.findall(r"^```(\w*)\n(.*?)^```$", text, flags=re.S | re.M)


def console_commands(text: str) -> list[tuple[str, list[str]]]:
    """(command, expected output lines) of every `$ ` line of the console blocks."""
    out = []
    for lang, body in fenced_blocks(text):
        if lang != "console":
            continue
        for line in body.splitlines():
            if line.startswith("$ "):
                out.append((line[2:], []))
            else:
                out[-1][1].append(line)
    return out


def matches(expected: list[str], actual: str) -> str | None:
    """None if the expected lines (module docstring) appear in `actual` in order, else the first missing one."""
    lines, i = actual.splitlines(), 0
    for want in expected:
        if want == "...":
            continue
        prefix = want[:-4] if want.endswith(" ...") else None
        while i < len(lines) and not (lines[i].startswith(prefix) if prefix is not None else lines[i] == want):
            i += 1
        if i == len(lines):
            return want
        i += 1
    return None


@pytest.fixture
def own_registry(monkeypatch):
    """Plugins loaded by a test stay in it: the registry, the loaded-plugin list and the
    imported modules are put back afterwards."""
    monkeypatch.setattr(POLICIES, "_classes", dict(POLICIES._classes))
    monkeypatch.setattr(POLICIES, "_listed", False)
    monkeypatch.setattr(registry, "_PLUGINS", [])
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        if name.startswith("my_policy"):
            del sys.modules[name]


@pytest.fixture
def workdir(tmp_path, monkeypatch, own_registry):
    """A copy of examples/ in a fresh current folder, one worker per command (in this process)."""
    shutil.copytree(EXAMPLES, tmp_path / "examples")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(runner, "default_jobs", lambda: 1)
    return tmp_path


def hb(capsys, *argv) -> tuple[int, str, str]:
    code = hbsim.cli.main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


# -- the page ----------------------------------------------------------------------------
def test_the_page_shows_the_example_files_as_they_are():
    bodies = [body for _, body in fenced_blocks(DOC.read_text())]
    for name in EXAMPLE_FILES:
        assert (EXAMPLES / name).read_text() in bodies, f"docs/EXTENDING.md does not show examples/{name} as it is"
    policy_lines = (EXAMPLES / "my_policy.py").read_text().splitlines()
    assert len([ln for ln in policy_lines if ln.strip()]) <= 40


def test_the_page_reader_and_matcher():
    text = "```console\n$ hb a\nx ...\n...\nz\n$ hb b\n```\n```toml\nk = 1\n```\n"
    assert console_commands(text) == [("hb a", ["x ...", "...", "z"]), ("hb b", [])]
    assert matches(["x ...", "...", "z"], "w\nx 1 2\ny\nz\n") is None
    assert matches(["z", "x ..."], "x 1\nz\n") == "x ..."          # in order
    assert matches(["x"], "x 1\n") == "x"                          # whole lines unless ` ...`


@pytest.mark.cli
def test_every_command_of_the_page_prints_what_it_shows(workdir, capsys, monkeypatch):
    commands = console_commands(DOC.read_text())
    assert {"--plugin", "--scenario", "--check", "stress", "plan"} <= {w for c, _ in commands for w in c.split()}
    for command, expected in commands:
        words = shlex.split(command)
        while "=" in words[0]:                        # VAR=value before the command
            var, _, value = words.pop(0).partition("=")
            assert var == "PYTHONPATH", f"{command}: only PYTHONPATH is set by the page's commands"
            monkeypatch.syspath_prepend(str(workdir / value))
        assert words[0] == "hb", command
        code, out, err = hb(capsys, *words[1:])
        wants_error = any(line.startswith("error:") for line in expected)
        assert code == (2 if wants_error else 0), f"{command}: exit {code}\n{err}"
        missing = matches(expected, err if wants_error else out)
        assert missing is None, f"{command}: the output lacks the line\n{missing}\nit printed:\n{out}{err}"


# -- policies: register, --plugin, entry points -------------------------------------------
class Mine(Uniform):
    name = "mine_for_tests"
    summary = "uniform under another name"


def test_register_adds_a_class_once_and_refuses_others(own_registry):
    assert register(Mine) is Mine and POLICIES["mine_for_tests"] is Mine
    register(Mine)                                          # the same class again: nothing happens
    assert list(POLICIES).count("mine_for_tests") == 1

    class Impostor(Uniform):
        name = "uniform"
    with pytest.raises(UserError, match="name='uniform' .* is taken by policies.simple.Uniform"):
        register(Impostor)
    for bad in (int, Policy, "uniform"):
        with pytest.raises(UserError, match="expected a subclass of policies.base.Policy"):
            register(bad)
    with pytest.raises(UserError, match="call policies.registry.register"):
        POLICIES["other"] = Mine
    assert POLICIES["uniform"] is Uniform


def fake_distribution(root: Path, entry_points: str, module: str = "") -> Path:
    """An installed distribution `fakepkg` in `root` (a sys.path folder): its entry points
    (the text of entry_points.txt) and, if given, its module `fake_policies`."""
    info = root / "fakepkg-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fakepkg\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[{registry.ENTRY_POINT_GROUP}]\n{entry_points}\n")
    if module:
        (root / "fake_policies.py").write_text(module)
    return root


FAKE_MODULE = ("from policies.simple import Uniform\n\n\nclass Fake(Uniform):\n    name = 'fake_ep'\n"
               "    summary = 'from an entry point'\n")


def test_an_entry_point_is_loaded_when_its_name_is_looked_up(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(fake_distribution(tmp_path, "fake_ep = fake_policies:Fake", FAKE_MODULE)))
    monkeypatch.delitem(sys.modules, "fake_policies", raising=False)
    reg = Registry([Uniform])
    assert "fake_policies" not in sys.modules                 # lazily: nothing imported yet
    assert "nope" not in reg and "fake_policies" not in sys.modules
    assert "fake_ep" in reg and reg["fake_ep"].__module__ == "fake_policies"
    assert list(reg) == ["uniform", "fake_ep"]
    sys.modules.pop("fake_policies")


@pytest.mark.parametrize("value,word", [
    ("no_such_mod_xyz:Fake", "cannot be loaded: ModuleNotFoundError: No module named 'no_such_mod_xyz'"),
    ("fake_policies:Uniform", "expected a policies.base.Policy subclass whose name is 'fake_ep'"),
])
def test_a_bad_entry_point_is_one_line_naming_it(tmp_path, monkeypatch, value, word):
    monkeypatch.syspath_prepend(str(fake_distribution(tmp_path, f"fake_ep = {value}", FAKE_MODULE)))
    monkeypatch.delitem(sys.modules, "fake_policies", raising=False)
    for look in (lambda reg: "fake_ep" in reg, list):
        with pytest.raises(UserError) as exc:
            look(Registry([Uniform]))
        text = str(exc.value)
        assert f"entry point fake_ep = {value!r} of group harnessbandit.policies" in text and word in text
        assert "\n" not in text
    sys.modules.pop("fake_policies", None)


@pytest.mark.cli
@pytest.mark.parametrize("argv,line", [
    (["--plugin", "no_such_module_xyz", "policies"],
     "error: hb --plugin: plugin module 'no_such_module_xyz' cannot be imported: ModuleNotFoundError: "
     "No module named 'no_such_module_xyz'"),
    (["--plugin", "examples/my_policy.py", "policies"],
     "error: hb --plugin: plugin module 'examples/my_policy.py' is not allowed: expected an importable dotted "
     "module name (e.g. mypkg.policies; a file's folder goes on PYTHONPATH)"),
    (["--plugin"], "error: hb: --plugin '' is not allowed: expected a module name, e.g. hb --plugin mypkg.policies "
                   "sim ..."),
    (["sim", "--plugin", "my_policy"],
     "error: hb sim: --plugin is a global option: put it before the command (hb --plugin MODULE sim ...)"),
])
def test_bad_plugin_options_are_one_line(own_registry, capsys, argv, line):
    code, out, err = hb(capsys, *argv)
    assert (code, out, err) == (2, "", line + "\n")


@pytest.mark.cli
def test_a_plugin_policy_is_known_to_every_command(workdir, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(workdir / "examples"))
    code, out, err = hb(capsys, "--plugin", "my_policy", "--plugin=my_policy", "sim", "--policy", "nope")
    assert code == 2 and "valid policies: all, uniform," in err and err.rstrip().endswith(", fixed, greedy_l")
    assert registry.loaded_plugins() == ["my_policy"]
    code, out, _ = hb(capsys, "sim", "--policy", "greedy_l", "--set", "policy.epsilon=0.3", "--seeds", "2",
                      "--steps", "5", "--out", "sim")
    meta = json.loads((workdir / "sim" / "greedy_l" / "seed1" / "run.json").read_text())
    assert code == 0 and meta["config"]["policy"] == {"name": "greedy_l", "label": "greedy_l", "epsilon": 0.3,
                                                      "decay": 0.9}
    code, _, err = hb(capsys, "sim", "--policy", "greedy_l", "--set", "policy.epsilon=2", "--steps", "5")
    assert code == 2 and "policy.epsilon=2 is out of range: expected a finite number in [0.0, 1.0]" in err


def test_run_many_hands_the_loaded_plugins_to_every_task(own_registry, monkeypatch):
    seen = []
    monkeypatch.setitem(runner.BACKENDS, "local", lambda tasks, jobs, done, **_: seen.extend(tasks))
    monkeypatch.setattr(registry, "_PLUGINS", ["mod_a"])
    runner.run_many([{"id": "x", "config": {}}, {"id": "y", "config": {}, "plugins": ["mod_b", "mod_a"]}], jobs=1)
    assert [t["plugins"] for t in seen] == [["mod_a"], ["mod_b", "mod_a"]]


# -- scenarios: the one loader --------------------------------------------------------------
def scenario_text(**over) -> str:
    lines = (EXAMPLES / "my_scenario.toml").read_text().splitlines()
    for key, value in over.items():
        lines = [f"{key} = {value}" if ln.startswith(f"{key} = ") else ln for ln in lines]
    return "\n".join(lines) + "\n"


@pytest.mark.cli
@pytest.mark.parametrize("name,text,problem", [
    ("my_scenario.toml", scenario_text(seeds="1"), "key 'seeds': seeds=1 is not allowed: expected an integer in [2, "),
    ("my_scenario.toml", scenario_text(target='"best"'),
     "key 'target': 'best' is not allowed: expected one of train, heldout_tasks, heldout_harness"),
    ("other.toml", scenario_text(), "key 'name': 'my_scenario' is not allowed: expected the file's stem, 'other'"),
    ("my_scenario.toml", "colour = 1\n" + scenario_text(), "key 'colour': unknown key; valid keys: name, summary,"),
    ("my_scenario.toml", scenario_text(steps='"a"'), "key 'steps': steps='a' is not allowed: expected an integer"),
    ("my_scenario.toml", scenario_text(lr="-1.0"), "key 'env': "),
    ("my_scenario.toml", scenario_text(n_harnesses="3"), "key 'env': env.roles='ordinary,ordinary,dead,dead' is "
                                                         "not allowed: expected n_harnesses=3 roles, got 4"),
    ("my_scenario.toml", scenario_text() + "colour = 1\n", "key 'env': env kind 'scenario' has no knob 'colour'"),
    ("my_scenario.toml", scenario_text().replace("steps = 40\n", ""), "key 'steps': missing; a scenario file sets"),
    ("my_scenario.toml", "steps = [\n", "malformed TOML"),
    ("my_scenario.toml", None, "scenario file not found"),
    ("my_scenario.toml", "", "is a directory, expected a scenario TOML file"),
    ("my_scenario.toml", b"\xff\xfe", "cannot read the scenario file: 'utf-8' codec can't decode"),
])
def test_a_bad_scenario_file_is_one_line_naming_file_and_key(tmp_path, capsys, name, text, problem):
    path = tmp_path / name
    if text == "":
        path.mkdir()
    elif isinstance(text, bytes):
        path.write_bytes(text)
    elif text is not None:
        path.write_text(text)
    for argv in (["scenarios", path, "--check"], ["sim", "--scenario", path, "--policy", "uniform"],
                 ["stress", "--scenarios", f"trap,{path}", "--out", tmp_path / "out"]):
        code, out, err = hb(capsys, *argv)
        assert code == 2 and out == "" and err.startswith(f"error: {path}: ") and problem in err, (argv, err)
        assert err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_a_scenario_file_is_the_same_scenario_as_the_shipped_one(tmp_path):
    shutil.copy(scenarios.FOLDER / "trap.toml", tmp_path / "trap.toml")
    own, shipped = scenarios.get(str(tmp_path / "trap.toml")), scenarios.get("trap")
    assert own.record() == {"name": "trap", "file": str(tmp_path / "trap.toml"), "sha256": shipped.sha256}
    assert shipped.sha256 == hashlib.sha256((scenarios.FOLDER / "trap.toml").read_bytes()).hexdigest()
    assert (own.env, own.steps, own.seeds, own.target) == (shipped.env, shipped.steps, shipped.seeds, shipped.target)
    (tmp_path / "x").mkdir(), (tmp_path / "y").mkdir()
    shutil.move(tmp_path / "trap.toml", tmp_path / "x" / "trap.toml")
    assert scenarios.get("../x/trap.toml", tmp_path / "y").file == str(tmp_path / "x" / "trap.toml")
    assert [scenarios.is_file_reference(r) for r in ("trap", "trap.toml", "a/trap", "T.TOML")] == [False, True, True,
                                                                                                 True]


@pytest.mark.cli
def test_hb_sim_records_the_scenario_file_and_reuses_runs_wherever_it_lies(workdir, capsys):
    argv = ["sim", "--policy", "uniform", "--seeds", "2", "--steps", "4", "--out", "out"]
    assert hb(capsys, *argv, "--scenario", "examples/my_scenario.toml")[0] == 0
    meta = json.loads((workdir / "out" / "uniform" / "seed0" / "run.json").read_text())
    data = (workdir / "examples" / "my_scenario.toml").read_bytes()
    assert meta["scenario"] == {"name": "my_scenario", "file": str(workdir / "examples" / "my_scenario.toml"),
                                "sha256": hashlib.sha256(data).hexdigest()}
    assert meta["config"]["env"]["roles"] == "ordinary,ordinary,dead,dead" and meta["config"]["steps"] == 4
    (workdir / "moved").mkdir()
    shutil.move(workdir / "examples" / "my_scenario.toml", workdir / "moved" / "my_scenario.toml")
    code, _, err = hb(capsys, *argv, "--scenario", "moved/my_scenario.toml")
    assert code == 0 and "0 runs" in err and "2 finished runs reused" in err           # the same content
    (workdir / "moved" / "my_scenario.toml").write_text(scenario_text(forget="0.3"))
    code, _, err = hb(capsys, *argv, "--scenario", "moved/my_scenario.toml")
    assert code == 2 and "--out" in err                                              # other runs: refused


@pytest.mark.cli
def test_hb_stress_refuses_its_folder_once_a_scenario_file_changed(workdir, capsys):
    argv = ["stress", "--scenarios", "examples/my_scenario.toml", "--policies", "round_robin", "--seeds", "2",
            "--out", "st"]            # a design beside the references (references alone are refused)
    code, out, _ = hb(capsys, *argv)
    # 4 axes x (uniform, mixed, round_robin, oracle, the best fixed arm) x 2 seeds, and 4 axes x 4 arms x 4 tuning seeds
    assert code == 0 and out.startswith("hb stress: 104 cells (1 scenarios x 4 axes x 5 policies x seeds, the best "
                                        "fixed arm included, plus 64 tuning cells of that arm), 0 already done, 104 run")
    cells = sorted((workdir / "st" / "cells").iterdir())
    assert len(cells) == 40 and {json.loads((c / "run.json").read_text())["scenario"]["name"] for c in cells} == \
        {"my_scenario"}
    code, out, _ = hb(capsys, *argv)                                           # unchanged: resumed
    assert code == 0 and "104 already done, 0 run" in out
    (workdir / "examples" / "my_scenario.toml").write_text(scenario_text(forget="0.3"))
    code, out, err = hb(capsys, *argv)
    assert code == 2 and "the same scenarios my_scenario; policies uniform,mixed,round_robin,oracle,fixed; seeds 2, but a scenario's env" in err
    assert sorted((workdir / "st" / "cells").iterdir()) == cells


# -- grids: [env] scenario -------------------------------------------------------------------
def write_grid(path: Path, env: str, extra: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'name = "g"\n{extra}[env]\n{env}\n[[policies]]\nname = "uniform"\n[[policies]]\nname = "oracle"\n')
    return path


def test_a_grid_scenario_path_is_relative_to_the_grid_file(tmp_path, monkeypatch):
    shutil.copytree(EXAMPLES, tmp_path / "examples")
    grid = write_grid(tmp_path / "grids" / "g.toml", 'scenario = "../examples/my_scenario.toml"\nforget = 0.3')
    monkeypatch.chdir(tmp_path / "examples")                # not the grid's folder
    spec = load_spec(grid)
    sc = scenarios.get(str(tmp_path / "examples" / "my_scenario.toml"))
    assert (spec.steps, spec.seeds) == (40, list(range(6)))  # the scenario's, the grid sets none
    assert spec.raw["env"] == {**sc.env, "forget": 0.3} and "scenario" not in spec.raw["env"]
    assert spec.scenario == sc.record()
    cells = spec.cells()
    assert len(cells) == 12 and cells[0].config["env"]["forget"] == 0.3
    assert cells[0].config["env"]["roles"] == "ordinary,ordinary,dead,dead"
    shipped = load_spec(write_grid(tmp_path / "g2.toml", 'scenario = "trap"', extra="steps = 3\nseeds = 2\n"))
    assert (shipped.steps, shipped.seeds, shipped.env) == (3, [0, 1], scenarios.get("trap").env)


@pytest.mark.parametrize("env,word", [
    ('scenario = "nope.toml"', "key 'env.scenario': "),
    ('scenario = "nope"', "key 'env.scenario': scenario='nope' is unknown"),
    ('scenario = "trap"\nkind = "bernoulli"', "key 'env.kind': 'bernoulli' contradicts scenario 'trap'"),
])
def test_a_bad_grid_scenario_is_one_spec_error(tmp_path, env, word):
    with pytest.raises(SpecError) as exc:
        load_spec(write_grid(tmp_path / "g.toml", env))
    assert str(exc.value).startswith(str(tmp_path / "g.toml")) and word in str(exc.value)
    assert "\n" not in str(exc.value)


@pytest.mark.cli
def test_a_grid_run_records_the_scenario_in_each_cell(workdir, capsys):
    grid = write_grid(workdir / "examples" / "g.toml", 'scenario = "my_scenario.toml"', extra="steps = 3\nseeds = 2\n")
    assert hb(capsys, "grid", "run", grid, "--out", "grid", "--jobs", "1")[0] == 0
    cells = sorted((workdir / "grid" / "cells").iterdir())
    record = scenarios.get("examples/my_scenario.toml").record()
    assert len(cells) == 4 and all(json.loads((c / "run.json").read_text())["scenario"] == record for c in cells)
    saved = json.loads((workdir / "grid" / "grid.json").read_text())["spec"]["raw"]
    assert "scenario" not in saved["env"] and saved["seeds"] == 2
    (workdir / "examples" / "my_scenario.toml").unlink()        # the record holds the content
    code, out, _ = hb(capsys, "grid", "status", "grid")
    assert code == 0 and "4" in out


# -- worker processes -----------------------------------------------------------------------
def hb_process(*argv, cwd: Path, pythonpath: list[Path]) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(p) for p in [REPO, *pythonpath])}
    return subprocess.run([sys.executable, "-m", "hbsim.cli", *map(str, argv)], cwd=cwd, env=env,
                          capture_output=True, text=True)


@pytest.mark.slow
def test_plugins_and_entry_points_reach_worker_processes(tmp_path):
    shutil.copytree(EXAMPLES, tmp_path / "examples")
    done = hb_process("--plugin", "my_policy", "sim", "--scenario", "examples/my_scenario.toml", "--policy",
                      "greedy_l", "--policy", "uniform", "--jobs", "2", "--out", "plugin",
                      cwd=tmp_path, pythonpath=[tmp_path / "examples"])
    assert done.returncode == 0, done.stderr
    assert "on 2 worker(s)" in done.stderr and re.search(r"^greedy_l  6      0\.299 ± 0\.024 ", done.stdout, re.M)
    assert len(list((tmp_path / "plugin" / "greedy_l").iterdir())) == 6
    # no --plugin: the installed distribution's entry point, found by name in every worker
    site = fake_distribution(tmp_path / "site", "greedy_l = my_policy:GreedyLearnability")
    shutil.copy(EXAMPLES / "my_policy.py", site / "my_policy.py")
    done = hb_process("stress", "--quick", "--scenarios", "examples/my_scenario.toml", "--policies", "greedy_l",
                      "--seeds", "2", "--jobs", "2", "--out", "stress", cwd=tmp_path, pythonpath=[site])
    assert done.returncode == 0, done.stderr
    assert re.search(r"^scenario +axis +target +reference +gap +mixed +greedy_l ", done.stdout, re.M), done.stdout
    assert re.search(r"^my_scenario  1x/lr1  train +oracle +\+0\.\d+ ", done.stdout, re.M), done.stdout
    listed = hb_process("policies", cwd=tmp_path, pythonpath=[site])
    # the name column is as wide as the longest policy name
    assert re.search(r"^greedy_l +epsilon-greedy on each harness's moving-average learnability$", listed.stdout, re.M)
