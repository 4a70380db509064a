"""The named model's cache (real_runs.native.lm): a conversion is written atomically, so a
failed or killed one leaves nothing a later run reads, and the temporaries of killed
conversions are removed by the next one."""
from __future__ import annotations

import os

import pytest

pytest.importorskip("transformers")

from policies.errors import UserError  # noqa: E402
from real_runs.native import lm  # noqa: E402


def test_a_failed_conversion_leaves_no_folder_and_removes_a_killed_ones_temporary(tmp_path, monkeypatch):
    import transformers
    m = lm.MODELS["smollm2-135m"]
    models = tmp_path / "models"
    models.mkdir()
    dest = models / f"{m.name}-0.1.2-c{lm.CONVERT_VERSION}"
    killed = models / f".tmp-{dest.name}-999999-abcd"          # a conversion killed mid-write (pid gone)
    (killed / "model.safetensors").parent.mkdir()
    (killed / "model.safetensors").write_bytes(b"half")
    os.utime(killed, (1, 1))
    seen = {}

    def fail(folder, gguf_file=None, **kw):
        seen["temporaries"] = sorted(p.name for p in models.iterdir())
        raise OSError("disk full")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", fail)
    with pytest.raises(UserError, match=r"is not a readable GGUF file \(disk full\)"):
        lm._convert(m, tmp_path / "x.gguf", dest, {"model": m.name})
    assert killed.name not in seen["temporaries"] and len(seen["temporaries"]) == 1   # only its own, hidden
    assert seen["temporaries"][0].startswith(f".tmp-{dest.name}-{os.getpid()}-")
    assert list(models.iterdir()) == []                        # nothing left: no folder, no temporary


def test_a_conversion_is_renamed_into_place_with_its_stamp_last(tmp_path, monkeypatch):
    import transformers

    class Saved:
        config = type("C", (), {})()

        def save_pretrained(self, folder):
            (folder / "model.safetensors").write_bytes(b"weights")

    class Tok:
        def save_pretrained(self, folder):
            (folder / "tokenizer.json").write_text("{}")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", lambda *a, **k: Saved())
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: Tok())
    m = lm.MODELS["smollm2-135m"]
    dest = tmp_path / "models" / "x"
    dest.parent.mkdir()
    lm._convert(m, tmp_path / "x.gguf", dest, {"model": m.name, "version": "9"})
    assert sorted(p.name for p in dest.iterdir()) == [lm.STAMP, "model.safetensors", "tokenizer.json"]
    import json
    assert json.loads((dest / lm.STAMP).read_text()) == {"model": m.name, "version": "9"}
    assert [p.name for p in dest.parent.iterdir()] == ["x"]
