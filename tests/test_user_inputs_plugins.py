"""Issue 41, cause 5: a user's policy class is trusted with its name only. Registration checks
the knob defaults against their own rules and refuses the reserved word `all`; every draw
checks the probabilities; an entry point named like a built-in gets a warning line; help
texts and `valid names` never import a third-party entry point (one broken entry point does
not refuse every `hb sim`); a plugin calling sys.exit at import is one line. Each case runs
`hb` in this process with the plugin module written to a folder on sys.path, and the
registry put back afterwards."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from policies import POLICIES, registry
from policies.errors import UserError

pytestmark = pytest.mark.cli

HEAD = "import numpy as np\nfrom policies.knobs import Knob, Knobs\nfrom policies.registry import register\n" \
       "from policies.simple import Uniform\n\n\n"
NAN_POLICY = HEAD + ("@register\nclass NanLaw(Uniform):\n    name = 'nan_law'\n    summary = 'bug'\n\n"
                     "    def probabilities(self):\n        return np.full(self.n_arms, np.nan)\n")
SHORT_POLICY = HEAD + ("@register\nclass Short(Uniform):\n    name = 'short_law'\n    summary = 'bug'\n\n"
                       "    def probabilities(self):\n        return np.full(self.n_arms, 0.1)\n")
BAD_DEFAULT = HEAD + ("@register\nclass BadDefault(Uniform):\n    name = 'bad_default'\n    summary = 'bug'\n"
                      "    KNOBS = Uniform.KNOBS | {'eps': Knob(2.0, 'exploration', 0.0, 1.0)}\n")
RESERVED = HEAD + "@register\nclass All(Uniform):\n    name = 'all'\n    summary = 'reserved'\n"
EXITS = "import sys\nsys.exit(3)\n"
SIM = ["sim", "--seeds", "1", "--steps", "3", "--jobs", "1", "--set", "env.n_tasks=12", "--set",
       "env.n_heldout_tasks=4"]


@pytest.fixture
def plugins(tmp_path, monkeypatch, capsys):
    """`hb(*args)` in this process with the plugin modules `write(name, text)` puts on sys.path;
    the registry, the loaded-plugin list and the modules are put back afterwards."""
    from hbsim.cli import main
    monkeypatch.delenv("HB_DEBUG", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(POLICIES, "_classes", dict(POLICIES._classes))
    monkeypatch.setattr(POLICIES, "_listed", False)
    monkeypatch.setattr(registry, "_PLUGINS", [])
    monkeypatch.setattr(registry, "_CHECKED_CLASH", set())
    before = set(sys.modules)

    class Hb:
        def write(self, name: str, text: str) -> str:
            (tmp_path / f"{name}.py").write_text(text)
            return name

        def __call__(self, *args):
            capsys.readouterr()
            code = main([str(a) for a in args])
            out, err = capsys.readouterr()
            return code, out, err
    yield Hb()
    for name in set(sys.modules) - before:
        if name.startswith("plug_") or name.startswith("fake"):
            del sys.modules[name]


def distribution(root: Path, entry_points: str) -> None:
    """An installed distribution `fakepkg` in `root` (on sys.path) with these entry points."""
    info = root / "fakepkg-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fakepkg\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[{registry.ENTRY_POINT_GROUP}]\n{entry_points}\n")


@pytest.mark.parametrize("module, argv, needle", [
    pytest.param("plug_nan", ["--policy", "nan_law"], "policy 'nan_law' (plug_nan.NanLaw): probabilities() returned "
                 "[nan nan nan nan nan nan] at step 1; allowed: 6 finite numbers >= 0 summing to 1", id="nan-probabilities"),
    pytest.param("plug_short", ["--policy", "short_law"], "probabilities() returned [0.1 0.1 0.1 0.1 0.1 0.1] at step 1",
                 id="probabilities-not-summing-to-1"),
    pytest.param("plug_bad", ["--policy", "uniform"], "policy class plug_bad.BadDefault (name='bad_default'): the "
                 "default of its knob 'eps' breaks its own rule: policy.eps=2.0 is out of range", id="default-out-of-range"),
    pytest.param("plug_all", ["--policy", "uniform"], "has name='all', a word hb reserves", id="reserved-all"),
    pytest.param("plug_exit", ["--policy", "uniform"], "plugin module 'plug_exit' cannot be imported: it called "
                 "sys.exit(3) while being imported", id="sys-exit-at-import"),
])
def test_a_users_policy_bug_is_one_line_naming_it(plugins, tmp_path, module, argv, needle):
    text = {"plug_nan": NAN_POLICY, "plug_short": SHORT_POLICY, "plug_bad": BAD_DEFAULT, "plug_all": RESERVED,
            "plug_exit": EXITS}[module]
    code, _, err = plugins("--plugin", plugins.write(module, text), *SIM, *argv, "--out", tmp_path / "out")
    assert code == 2 and "Traceback" not in err, err
    assert err.splitlines()[-1].startswith("error: ") and needle in err, err
    assert err.count("error: ") == 1


def test_probabilities_are_checked_at_every_draw(plugins):
    from policies.simple import Uniform
    policy = Uniform(3, seed=0)
    policy.probabilities = lambda: [0.5, 0.5, -0.0001]          # a bug showing only later in a run
    with pytest.raises(UserError, match=r"policy 'uniform' \(policies.simple.Uniform\): probabilities\(\) returned"):
        policy.select()


def test_an_entry_point_named_like_a_builtin_is_named(plugins, tmp_path):
    distribution(tmp_path, "uniform = fake_mod:Other")
    code, out, err = plugins(*SIM, "--policy", "uniform")
    assert code == 0, err
    assert ("warning: entry point uniform = 'fake_mod:Other' of group harnessbandit.policies is named like the "
            "built-in policy 'uniform': hb uses the built-in and never that entry point") in err
    assert err.count("entry point uniform") == 1


def test_a_broken_entry_point_refuses_only_a_command_that_names_it(plugins, tmp_path, capsys):
    distribution(tmp_path, "broken_ep = no_such_module_xyz:Cls")
    with pytest.raises(SystemExit) as stop:                     # the help text names it without loading it
        plugins("sim", "--help")
    out, err = capsys.readouterr()
    assert stop.value.code == 0 and "broken_ep" in out and err == "", err
    code, _, err = plugins(*SIM, "--policy", "uniform")         # the help text and checks load nothing
    assert code == 0, err
    code, _, err = plugins(*SIM, "--policy", "nope")            # `valid names` lists it without loading it
    assert code == 2 and err.rstrip().endswith(", broken_ep") and "no_such_module_xyz" not in err
    code, _, err = plugins(*SIM, "--policy", "broken_ep")
    assert code == 2 and "entry point broken_ep = 'no_such_module_xyz:Cls'" in err and "cannot be loaded" in err
    assert "no_such_module_xyz" not in sys.modules
    for argv in ([*SIM, "--policy", "all"], ["policies"]):        # the commands that list every policy name it
        code, _, err = plugins(*argv)
        assert code == 2 and err == ("error: entry point broken_ep = 'no_such_module_xyz:Cls' of group "
                                     "harnessbandit.policies cannot be loaded: ModuleNotFoundError: No module named "
                                     "'no_such_module_xyz'\n"), err


def test_registration_rules_of_the_shipped_policies_hold():
    assert all(name != "all" for name in registry.SHIPPED_POLICIES)
    for name in registry.SHIPPED_POLICIES:                      # every shipped default inside its own range
        for knob, spec in POLICIES[name].KNOBS.items():
            spec.check(knob, spec.default)
