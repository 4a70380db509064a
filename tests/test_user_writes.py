"""What hb writes in a user's folders and how: files and folders under the user's umask, an
exclusive write never replaces a file, temporaries a kill left are removed at every depth hb
writes at, an immutable file is refused before any write, a rerun with fewer seeds reports
only its own runs, a TRL resume takes the newest complete checkpoint; and what an accepted
input then does (`hb scenarios --check` keyed by position, a group filter that drops every
group named)."""
from __future__ import annotations

import os
import stat
import subprocess

import pytest

from ablations_testkit import study_text
from hbsim import contract
from hbsim.contract import atomic
from hbsim.contract import markers
from policies.errors import UserError
from user_inputs_kit import CAL, SIM, TINY_GRID, hb, tree_hash  # noqa: F401 (hb: a fixture)


@pytest.mark.parametrize("mask", [0o022, 0o077])
def test_created_files_follow_the_umask(tmp_path, hb, mask):
    sim, grid = tmp_path / "sim", tmp_path / "grid"
    (tmp_path / "tiny.toml").write_text(TINY_GRID)
    (tmp_path / "study.toml").write_text(study_text(steps=2, seeds=1))
    study, validity, csv = tmp_path / "study", tmp_path / "validity", tmp_path / "cal" / "p.csv"
    os.umask(mask)                                   # the `hb` fixture restores the umask
    for argv in ([*SIM, "--counterfactual", "--out", sim], ["grid", "run", tmp_path / "tiny.toml", "--out", grid,
                 "--jobs", "1"], ["grid", "collect", grid], ["validity", study, "--study", tmp_path / "study.toml",
                 "--min-step", "0", "--resamples", "5", "--out", validity], [*CAL, "--csv", csv]):
        code, _, err = hb(*argv)
        assert code == 0, (argv, err[-3000:])
    for root in (sim, grid, study, validity, csv.parent):
        modes = {p.relative_to(tmp_path): stat.S_IMODE(p.stat().st_mode) for p in [root, *root.rglob("*")]}
        want = {p: (0o777 if (tmp_path / p).is_dir() else 0o666) & ~mask for p in modes}
        assert modes == want


def test_exclusive_write_never_replaces(tmp_path):
    target = tmp_path / "p.csv"
    atomic.atomic_write(target, "first", exclusive=True)
    with pytest.raises(UserError, match="appeared while this command ran: nothing is overwritten"):
        atomic.atomic_write(target, "second", exclusive=True)
    assert target.read_text() == "first" and sorted(p.name for p in tmp_path.iterdir()) == ["p.csv"]


def test_temporaries_are_removed_at_every_depth_hb_writes(tmp_path):
    """A kill -9 while the stress profile wrote its figure left DIR/stress/figures/.tmp-*: the
    rerun's claim removes it (its writer is dead), and a user's hidden file stays."""
    grid = tmp_path / "g"
    markers.claim_output_dir(grid, "grid", tool="hb stress")
    figures = grid / contract.STRESS_DIR / contract.FIGURES_DIR
    figures.mkdir(parents=True)
    dead = figures / ".tmp-share.png-999999999-abcdefgh.png"         # pid 999999999: no such process
    dead.write_bytes(b"half a png")
    (figures / ".mine").write_text("the user's")
    markers.claim_output_dir(grid, "grid", tool="hb stress")
    assert sorted(p.name for p in figures.iterdir()) == [".mine"]


def test_immutable_stress_file_is_refused_before_any_write(tmp_path, hb):
    grid = tmp_path / "g"
    markers.claim_output_dir(grid, "grid", tool="hb stress")
    (grid / "stress").mkdir()
    index = grid / "stress" / "index.html"
    index.write_text("<p>an earlier profile</p>")
    if subprocess.run(["chattr", "+i", str(index)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not available here (needs root and a file system with the flag)")
    try:
        before = tree_hash(grid)
        code, _, err = hb("stress", "--scenarios", "trap", "--policies", "mixed", "--seeds", "2", "--jobs", "1",
                          "--out", grid)
        assert code == 2 and "stress/index.html' is immutable or append-only" in err and err.count("\n") == 1, err
        assert tree_hash(grid) == before
    finally:
        subprocess.run(["chattr", "-i", str(index)], check=True)


def test_study_rerun_with_fewer_seeds_reports_only_its_own(tmp_path, hb):
    two, one = tmp_path / "two.toml", tmp_path / "one.toml"
    two.write_text(study_text(steps=2, seeds=2))
    one.write_text(study_text(steps=2, seeds=1))
    common = ("--min-step", "0", "--resamples", "5", "--jobs", "1")
    code, _, err = hb("validity", tmp_path / "s", "--study", two, *common)
    assert code == 0, err[-3000:]
    code, rerun, err = hb("validity", tmp_path / "s", "--study", one, *common)
    assert code == 0, err[-3000:]
    code, fresh, err = hb("validity", tmp_path / "fresh", "--study", one, *common)
    assert code == 0, err[-3000:]
    assert rerun == fresh


def test_trl_resume_uses_the_newest_complete_checkpoint(tmp_path):
    from real_runs.integrations.trl_run import resume_checkpoint
    run = tmp_path / "trl"
    markers.claim_output_dir(run, "run", tool="hb real --backend trl")
    for step, complete in ((2, True), (10, True), (12, False)):         # 10 > 2 numerically, 12 half-made
        folder = run / "trl" / f"checkpoint-{step}"
        folder.mkdir(parents=True)
        (folder / "model.safetensors").write_bytes(b"m")
        if complete:
            (folder / "harnessbandit.pt").write_bytes(b"s")
    assert resume_checkpoint(run) == run / "trl" / "checkpoint-10"
    assert sorted(p.name for p in (run / "trl").iterdir()) == ["checkpoint-10", "checkpoint-2"]


def test_scenarios_check_keys_results_by_position_not_label(hb):
    """`--policy uniform` / `--policy oracle` are policies of their own beside the built-in ones
    (the same config, so the same numbers), not a collision of labels."""
    code, out, err = hb("scenarios", "trap", "--check", "--seeds", "2", "--policy", "uniform", "--policy", "oracle")
    assert code == 0, err[-3000:]
    shipped = out.split("on every axis")[0]           # the shipped axis's block (the other axes follow)
    rows = [line.split(None, 1) for line in shipped.splitlines() if line.startswith("  ") and line[2] != " "]
    assert [r[0] for r in rows] == ["oracle", "uniform", "uniform", "oracle"]
    assert rows[1][1] == rows[2][1] and rows[0][1] == rows[3][1] and rows[0][1] != rows[1][1]


def test_group_filter_that_drops_every_group_is_named(tmp_path, hb):
    code, out, err = hb(*SIM, "--set", "env.min_abs_adv=1e9", "--out", tmp_path / "s")
    assert code == 0, err[-3000:]
    assert out.splitlines()[-1] == ("warning: uniform: 1 of 1 runs optimized no group in any step: the group filter "
                                    "(equal rewards, env.keep_band, env.min_abs_adv) dropped every group, so they did "
                                    "not train; loosen the filter")
    code, out, err = hb(*SIM, "--out", tmp_path / "t")
    assert code == 0 and "warning" not in out, err[-3000:]
