"""How hb answers a user's error: a UserError (and the machine's refusals to write: disk full,
read-only, ...) is one line on stderr and exit 2, anything else a traceback (a bug); HB_DEBUG
re-raises; a closed pipe ends quietly; every value check names the field, the value and what
is allowed (policies.validate); `hb real` checks its arguments before torch is imported."""
from __future__ import annotations

import os
import subprocess
import sys
import types

import pytest

from policies import validate
from policies.errors import UserError
from user_inputs_kit import REAL, REPO, TRL


def _fake_command(monkeypatch, exc: Exception) -> None:
    from hbsim import cli
    module = types.ModuleType("hb_fake_command")
    module.add_arguments = lambda parser: None

    def main(args):
        raise exc
    module.main = main
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(cli.SUBCOMMANDS, "fake", (module.__name__, "raises"))


def test_user_error_is_one_line_exit_2(monkeypatch, capsys):
    from hbsim.cli import main
    _fake_command(monkeypatch, UserError("--x=1 is not allowed: expected 2\nsecond line"))
    assert main(["fake"]) == 2
    err = capsys.readouterr().err
    assert err == "error: --x=1 is not allowed: expected 2\n"


@pytest.mark.parametrize("exc", [ValueError("a library bug"), KeyError("policy"), FileNotFoundError("x")])
def test_other_exceptions_show_their_traceback(monkeypatch, capsys, exc):
    from hbsim.cli import main
    _fake_command(monkeypatch, exc)
    with pytest.raises(type(exc)):
        main(["fake"])
    assert "error:" not in capsys.readouterr().err


@pytest.mark.slow
def test_library_bug_prints_a_traceback_in_a_real_process():
    code = ("import sys, types; from hbsim import cli; m = types.ModuleType('boom'); "
            "m.add_arguments = lambda p: None\n"
            "def main(a): raise ValueError('a library bug')\n"
            "m.main = main; sys.modules['boom'] = m; cli.SUBCOMMANDS['boom'] = ('boom', 'x')\n"
            "sys.exit(cli.main(['boom']))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "Traceback" in proc.stderr and "ValueError: a library bug" in proc.stderr


@pytest.mark.parametrize("value, shows", [("1", True), ("true", True), ("YES", True), ("0", False), ("no", False),
                                          ("", False)])
def test_hb_debug_only_for_a_true_value(monkeypatch, capsys, value, shows):
    from hbsim.cli import main
    _fake_command(monkeypatch, UserError("--x=1 is not allowed"))
    monkeypatch.setenv("HB_DEBUG", value)
    if shows:
        with pytest.raises(UserError):
            main(["fake"])
    else:
        assert main(["fake"]) == 2 and capsys.readouterr().err == "error: --x=1 is not allowed\n"


def test_disk_full_is_one_line(monkeypatch, capsys):
    import errno
    from hbsim.cli import main
    _fake_command(monkeypatch, OSError(errno.ENOSPC, "No space left on device", "/x/eval.parquet"))
    assert main(["fake"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: the disk is full writing '/x/eval.parquet'") and err.count("\n") == 1


@pytest.mark.slow
def test_broken_pipe_ends_quietly():
    """`hb policies | head -1`: exit 0 and nothing on stderr."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(f"{sys.executable} -m hbsim.cli policies | head -1; exit ${{PIPESTATUS[0]}}",
                          shell=True, executable="/bin/bash", capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0 and proc.stderr == "" and proc.stdout.count("\n") == 1


@pytest.mark.unit
@pytest.mark.parametrize("call, needle", [
    (lambda: validate.check_int("--steps", 0, 1, 10), "--steps=0 is not allowed: expected an integer in [1, 10]"),
    (lambda: validate.check_int("--steps", 1.5, 1), "--steps=1.5 is not allowed: expected an integer >= 1"),
    (lambda: validate.check_int("--steps", True, 0), "--steps=True"),
    (lambda: validate.check_float("alpha", float("nan"), 0, 1), "expected a finite number in [0, 1]"),
    (lambda: validate.check_float("alpha", 1.0, 0, 1, high_open=True), "alpha=1.0 is out of range"),
    (lambda: validate.check_float("alpha", "x"), "alpha='x' is not allowed: expected a finite number"),
    (lambda: validate.check_choice("--baseline", "z", ["a", "b"]), "--baseline='z' is unknown; valid names: a, b"),
    (lambda: validate.parse_sets(["lr"]), "--set 'lr' is not allowed: expected KEY=VALUE"),
    (lambda: validate.parse_sets(["=1"]), "expected KEY=VALUE"),
])
def test_validate_messages(call, needle):
    with pytest.raises(UserError) as info:
        call()
    assert needle in str(info.value)


@pytest.mark.unit
def test_validate_values_and_parser():
    assert validate.check_int("n", 3, 1, 3) == 3 and validate.check_float("a", "0.5", 0, 1) == 0.5
    assert validate.parse_sets(["env.lr=0.5", "policy.arms=[0, 1]", "x=none", "y=abc", "env.lr=1e-3"]) == {
        "env.lr": 1e-3, "policy.arms": [0, 1], "x": None, "y": "abc"}


@pytest.mark.slow
@pytest.mark.parametrize("argv", [[*TRL, "--set", "group_size=1"], [*TRL, "--set", 'harnesses=["json", "json"]'],
                                  [*REAL, "--set", "batch_groups=0"]], ids=["trl-group-size", "trl-dup", "real-knob"])
def test_real_checks_run_before_torch_is_imported(tmp_path, argv):
    code = ("import sys; from hbsim.cli import main; rc = main(sys.argv[1:]); "
            "print(rc, 'torch' in sys.modules, 'transformers' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code, *argv, "--out", str(tmp_path / "x")], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.stdout.split() == ["2", "False", "False"], proc.stderr[-3000:]
    assert not (tmp_path / "x").exists()
