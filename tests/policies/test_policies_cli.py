"""`hb policies` and the dispatcher's error handling, through a subprocess."""
import subprocess
import sys

import pytest

from policies import POLICIES


@pytest.mark.slow
def test_hb_policies_cli_lists_every_policy_and_errors_exit_2():
    out = subprocess.run([sys.executable, "-m", "hbsim.cli", "policies"], capture_output=True, text=True)
    assert out.returncode == 0
    for name in POLICIES:
        assert f"\n{name} " in "\n" + out.stdout, name
    assert "  tau = 0.3: softmax temperature (a finite number in (0.0, " in out.stdout
    assert "  arms = None: the harness subset" in out.stdout
    bad = subprocess.run([sys.executable, "-m", "hbsim.cli", "nonsense"], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "valid commands" in bad.stderr
    bad = subprocess.run([sys.executable, "-m", "hbsim.cli", "policies", "--frob"], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--frob" in bad.stderr
    helped = subprocess.run([sys.executable, "-m", "hbsim.cli", "--help"], capture_output=True, text=True)
    assert helped.returncode == 0 and "policies" in helped.stdout and "grid" in helped.stdout
