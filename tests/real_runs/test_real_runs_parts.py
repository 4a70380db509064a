"""real_runs.parts: a file moved in checked parts (the GPU check's way to carry the 98 MB
GGUF in device calls of at most 64 MiB): split, status, join, and every bad input one line,
exit 2, the output file left as it was."""
from __future__ import annotations

import hashlib
import json

import pytest

from policies.errors import UserError
from real_runs import parts

pytestmark = pytest.mark.unit

#: 2.5 MB of bytes that differ from part to part (no two parts alike)
DATA = bytes((i * 7919 + i // 1000) % 251 for i in range(2_500_000))


@pytest.fixture
def split_dir(tmp_path):
    src = tmp_path / "model.gguf"
    src.write_bytes(DATA)
    parts.split(src, tmp_path / "parts", part_mb=1)
    return tmp_path / "parts"


def test_split_and_join_round_trip_exactly(split_dir, tmp_path):
    manifest = json.loads((split_dir / "model.gguf.parts.json").read_text())
    assert [p["name"] for p in manifest["parts"]] == ["model.gguf.part000", "model.gguf.part001", "model.gguf.part002"]
    assert [p["size"] for p in manifest["parts"]] == [1_000_000, 1_000_000, 500_000]
    assert manifest["sha256"] == hashlib.sha256(DATA).hexdigest() and manifest["size"] == len(DATA)
    assert (split_dir / "model.gguf.part001").read_bytes() == DATA[1_000_000:2_000_000]
    assert parts.status(split_dir) == [(p["name"], "ok") for p in manifest["parts"]]
    out = parts.join(split_dir, tmp_path / "joined.gguf")
    assert out.read_bytes() == DATA
    assert sorted(p.name for p in tmp_path.iterdir()) == ["joined.gguf", "model.gguf", "parts"]   # no temporary left


def test_status_names_each_missing_or_altered_part(split_dir):
    (split_dir / "model.gguf.part000").unlink()
    raw = bytearray((split_dir / "model.gguf.part001").read_bytes())
    raw[10] ^= 1
    (split_dir / "model.gguf.part001").write_bytes(bytes(raw))
    (split_dir / "model.gguf.part002").write_bytes(DATA[2_000_000:2_400_000])
    assert parts.status(split_dir) == [("model.gguf.part000", "missing"), ("model.gguf.part001", "wrong checksum"),
                                       ("model.gguf.part002", "wrong size")]
    assert parts.main(["status", str(split_dir)]) == 1


def _flip(folder, name="model.gguf.part002"):
    raw = bytearray((folder / name).read_bytes())
    raw[-1] ^= 0xFF
    (folder / name).write_bytes(bytes(raw))


def _manifest(folder, **change):
    path = folder / "model.gguf.parts.json"
    manifest = json.loads(path.read_text())
    manifest.update(change)
    path.write_text(json.dumps(manifest))


#: (id, what to do to the split folder, command builder (split folder, tmp) -> argv, needle)
CASES = [
    ("join-part-missing", lambda d: (d / "model.gguf.part001").unlink(), lambda d, t: ["join", d, t / "out.gguf"],
     "part model.gguf.part001 in"),
    ("join-part-altered", _flip, lambda d, t: ["join", d, t / "out.gguf"], "model.gguf.part002 in .* is wrong checksum"),
    ("join-part-truncated", lambda d: (d / "model.gguf.part000").write_bytes(b"x"),
     lambda d, t: ["join", d, t / "out.gguf"], "model.gguf.part000 in .* is wrong size"),
    ("join-whole-wrong", lambda d: _manifest(d, sha256="0" * 64), lambda d, t: ["join", d, t / "out.gguf"],
     "the joined model.gguf has SHA-256 .*, the manifest 000000000000...; split the file again"),
    ("join-no-manifest", lambda d: (d / "model.gguf.parts.json").unlink(), lambda d, t: ["join", d, t / "out.gguf"],
     "holds no \\*.parts.json manifest"),
    ("join-manifest-garbage", lambda d: (d / "model.gguf.parts.json").write_text("{"),
     lambda d, t: ["join", d, t / "out.gguf"], "unreadable parts manifest of format 1 .*; split the file again"),
    ("join-manifest-other-format", lambda d: _manifest(d, format=9), lambda d, t: ["join", d, t / "out.gguf"],
     "is not a parts manifest of format 1"),
    ("join-out-is-a-folder", lambda d: None, lambda d, t: ["join", d, d], "expected a file path in an existing folder"),
    ("join-out-folder-missing", lambda d: None, lambda d, t: ["join", d, t / "no" / "out.gguf"],
     "expected a file path in an existing folder"),
    ("split-file-missing", lambda d: None, lambda d, t: ["split", t / "nosuch.gguf", t / "p2"],
     "expected an existing file to split"),
    ("split-part-mb-0", lambda d: None, lambda d, t: ["split", t / "model.gguf", t / "p2", "--part-mb", "0"],
     "--part-mb=0.0 is out of range"),
    ("split-into-a-file", lambda d: None, lambda d, t: ["split", t / "model.gguf", t / "model.gguf"],
     "it is a file; expected a folder"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_exit_2_and_the_output_is_left(case, split_dir, tmp_path, capsys):
    _, spoil, argv, needle = case
    out = tmp_path / "out.gguf"
    out.write_bytes(b"the user's earlier file")
    spoil(split_dir)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    capsys.readouterr()
    assert parts.main([str(a) for a in argv(split_dir, tmp_path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: ") and "Traceback" not in err
    import re
    assert re.search(needle, err), err
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before     # nothing written or lost


def test_join_keeps_an_output_that_already_holds_the_bytes(split_dir, tmp_path):
    out = tmp_path / "out.gguf"
    parts.join(split_dir, out)
    inode = out.stat().st_ino
    (split_dir / "model.gguf.part000").unlink()          # parts may be gone once the whole is there
    assert parts.main(["join", str(split_dir), str(out)]) == 0 and out.stat().st_ino == inode
    with pytest.raises(UserError, match="part model.gguf.part000"):
        parts.join(split_dir, tmp_path / "other.gguf")
