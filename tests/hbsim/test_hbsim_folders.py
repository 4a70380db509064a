"""hbsim.contract.folders in process: output-folder kinds, markers and --resume checks (the CLI side
of these is tests/test_user_inputs.py)."""
from __future__ import annotations

import pytest

from hbsim import contract

from hbsim.contract import atomic, folders

from hbsim.contract import markers
from policies.errors import UserError


def test_claim_output_dir_marker(tmp_path):
    root = markers.claim_output_dir(tmp_path / "s", "sim", "h1", tool="hb sim")
    assert (root / contract.KIND_FILE).read_text() == ('{"command": null, "config_hash": "h1", "files": [], '
                                                       '"kind": "sim", "state": "incomplete", "tool": "hb sim"}\n')
    atomic.atomic_write(root / "a.txt", "a")                          # written after the claim: listed
    (root / "mine.txt").write_text("not hb's")                         # not through atomic_write: not listed
    markers.complete_output_dir(root)
    assert folders.read_marker(root) == {"kind": "sim", "config_hash": "h1", "tool": "hb sim", "command": None,
                                         "state": "complete", "files": ["a.txt"]}
    assert folders.written_files(root) == {root / "a.txt"}
    markers.claim_output_dir(root, "sim", "h1", tool="hb sim")         # a rerun keeps the list, incomplete again
    assert folders.read_marker(root)["state"] == "incomplete" and folders.read_marker(root)["files"] == ["a.txt"]
    (root / "a.txt").unlink(), (root / "mine.txt").unlink()
    (root / contract.KIND_FILE).write_text('{"kind": "nope"}')
    with pytest.raises(UserError, match="kind='nope' is unknown; valid kinds: sim, run, grid, report, study"):
        folders.read_marker(root)
    markers.claim_output_dir(root, "sim", "h1", tool="hb sim")           # an unreadable marker is replaced
    assert folders.read_marker(root)["kind"] == "sim"
    assert sorted(p.name for p in root.iterdir()) == [contract.KIND_FILE]


# -- kinds, markers, --resume -----------------------------------------------------------------
def test_check_resume_dir(tmp_path):
    def refused(path, needle):
        with pytest.raises(UserError, match=needle):
            folders.check_resume_dir(path)
    refused(tmp_path / "nope", "does not exist")
    (tmp_path / "f").write_text("x")
    refused(tmp_path / "f", "is a file")
    markers.claim_output_dir(tmp_path / "e", "run")
    refused(tmp_path / "e", "holds no checkpoint")       # ours (marker) but never checkpointed
    (tmp_path / "g").mkdir()
    (tmp_path / "g" / "grid.json").write_text("{}")
    refused(tmp_path / "g", "is a grid directory, not a run directory")
    (tmp_path / "u").mkdir()
    (tmp_path / "u" / "notes.txt").write_text("x")
    refused(tmp_path / "u", "was not created by hb")
    (tmp_path / "e" / "checkpoints").mkdir()
    (tmp_path / "e" / "checkpoints" / "last.pt").write_bytes(b"")
    assert folders.check_resume_dir(tmp_path / "e") == tmp_path / "e" / "checkpoints" / "last.pt"
    trl = "trl/checkpoint-*/harnessbandit.pt"             # a glob: TRL's checkpoint-N folders
    with pytest.raises(UserError, match="holds no checkpoint"):
        folders.check_resume_dir(tmp_path / "e", trl)
    (tmp_path / "e" / "trl" / "checkpoint-3").mkdir(parents=True)
    (tmp_path / "e" / "trl" / "checkpoint-3" / "harnessbandit.pt").write_bytes(b"")
    assert folders.check_resume_dir(tmp_path / "e", trl) == tmp_path / "e" / "trl" / "checkpoint-3" / "harnessbandit.pt"


def test_check_output_dir_states(tmp_path):
    assert folders.check_output_dir(tmp_path / "new", "sim", "h1") == "new"
    markers.claim_output_dir(tmp_path / "s", "sim", "h1")
    assert folders.check_output_dir(tmp_path / "s", "sim", "h1") == "resume"
    with pytest.raises(UserError, match="another configuration.*pass --force"):
        folders.check_output_dir(tmp_path / "s", "sim", "h2")
    assert folders.check_output_dir(tmp_path / "s", "sim", "h2", force=True) == "forced"
    with pytest.raises(UserError, match="choose a new path$"):
        folders.check_output_dir(tmp_path / "s", "run", force_flag=None)
    (tmp_path / "legacy" / "uniform" / "seed0").mkdir(parents=True)
    (tmp_path / "legacy" / "uniform" / "seed0" / "run.json").write_text("{}")
    assert folders.legacy_kind(tmp_path / "legacy") == "sim"
    (tmp_path / "study" / "bernoulli").mkdir(parents=True)
    (tmp_path / "legacy").rename(tmp_path / "study" / "bernoulli")
    assert folders.legacy_kind(tmp_path / "study") == "study"      # <env>/<label>/seed<N>/: hb validity --study
    assert folders.check_output_dir(tmp_path / "study", "study") == "resume"
    (tmp_path / "study" / "bernoulli" / "notes.txt").write_text("x")
    assert folders.legacy_kind(tmp_path / "study" / "bernoulli") is None
    assert folders.legacy_kind(tmp_path / "study") is None
