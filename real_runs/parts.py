"""A file bigger than one transfer carries, moved in parts (scripts/gpu_check.sh's LM phase:
a device call carries at most 64 MiB, the SmolLM2 GGUF is 98 MB).

    python -m real_runs.parts split FILE DIR [--part-mb 60]   # DIR/NAME.part000, ..., DIR/NAME.parts.json
    python -m real_runs.parts status DIR                      # which parts are there and intact
    python -m real_runs.parts join DIR OUTFILE                # every part and the whole checked, then OUTFILE

`split` writes numbered parts of at most `--part-mb` MB (10^6 bytes) and a manifest
(`NAME.parts.json`: the file's name, size and SHA-256, each part's name, size and SHA-256).
`join` reads the one manifest in DIR, checks every part's size and SHA-256, streams them
into a hidden temporary beside OUTFILE while hashing the whole, and renames it into place
only when the whole's SHA-256 is the manifest's (`hbsim.contract.atomic.atomic_write`): a missing,
truncated or altered part, or a wrong whole, is one line naming it, exit 2, and OUTFILE is
left as it was. An OUTFILE that already holds the manifest's bytes is kept as it is.
Every part is written atomically too, so a killed `split` leaves no part that looks whole.
"""
from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

from hbsim.contract.atomic import atomic_write, write_json_atomic
from hbsim.contract.shapes import read_record
from policies.errors import UserError

FORMAT = 1
MANIFEST_SUFFIX = ".parts.json"
_CHUNK = 1 << 20


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(_CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def part_name(name: str, index: int) -> str:
    return f"{name}.part{index:03d}"


def split(file, folder, part_mb: float = 60.0) -> Path:
    """Cut `file` into parts of at most `part_mb` MB in `folder` (created); returns the manifest."""
    file, folder = Path(file), Path(folder)
    if not file.is_file():
        raise UserError(f"FILE={str(file)!r} is not allowed: expected an existing file to split")
    if not 1 <= part_mb <= 10_000:
        raise UserError(f"--part-mb={part_mb!r} is out of range: expected 1 to 10000 (MB)")
    if folder.exists() and not folder.is_dir():
        raise UserError(f"DIR={str(folder)!r} is not allowed: it is a file; expected a folder for the parts")
    folder.mkdir(parents=True, exist_ok=True)
    limit = int(part_mb * 1_000_000)
    parts, whole = [], hashlib.sha256()
    with open(file, "rb") as fh:
        while True:
            data = fh.read(limit)
            if not data:
                break
            whole.update(data)
            name = part_name(file.name, len(parts))
            atomic_write(folder / name, data)
            parts.append({"name": name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    manifest = {"format": FORMAT, "name": file.name, "size": file.stat().st_size, "sha256": whole.hexdigest(),
                "parts": parts}
    return write_json_atomic(folder / f"{file.name}{MANIFEST_SUFFIX}", manifest)


def read_manifest(folder) -> dict:
    """The one manifest in `folder` (UserError when there is none, several, or it is not ours)."""
    folder = Path(folder)
    found = sorted(folder.glob(f"*{MANIFEST_SUFFIX}")) if folder.is_dir() else []
    if len(found) != 1:
        what = "no" if not found else f"{len(found)}"
        raise UserError(f"DIR={str(folder)!r} holds {what} *{MANIFEST_SUFFIX} manifest; expected the one "
                        "`python -m real_runs.parts split` wrote beside its parts")
    remedy = "split the file again"
    manifest = read_record(found[0], None, f"parts manifest of format {FORMAT}", remedy)
    try:
        ok = (manifest.get("format") == FORMAT and isinstance(manifest.get("parts"), list)
              and all({"name", "size", "sha256"} <= set(p) for p in manifest["parts"]))
    except (AttributeError, TypeError):
        ok = False
    if not ok:
        raise UserError(f"{found[0]} is not a parts manifest of format {FORMAT}; split the file again")
    return manifest


def status(folder) -> list[tuple[str, str]]:
    """[(part name, "ok" | "missing" | "wrong size" | "wrong checksum"), ...] of the manifest's parts."""
    folder = Path(folder)
    out = []
    for part in read_manifest(folder)["parts"]:
        path = folder / part["name"]
        if not path.is_file():
            state = "missing"
        elif path.stat().st_size != part["size"]:
            state = "wrong size"
        elif _sha256(path) != part["sha256"]:
            state = "wrong checksum"
        else:
            state = "ok"
        out.append((part["name"], state))
    return out


def join(folder, out) -> Path:
    """Check every part, write the whole to `out` atomically, check its SHA-256; returns `out`."""
    folder, out = Path(folder), Path(out)
    manifest = read_manifest(folder)
    if out.is_dir() or not out.parent.is_dir():
        raise UserError(f"OUTFILE={str(out)!r} is not allowed: expected a file path in an existing folder")
    if out.is_file() and out.stat().st_size == manifest["size"] and _sha256(out) == manifest["sha256"]:
        return out
    bad = [(name, state) for name, state in status(folder) if state != "ok"]
    if bad:
        raise UserError(f"part {bad[0][0]} in {str(folder)!r} is {bad[0][1]} ({len(bad)} of "
                        f"{len(manifest['parts'])} parts not intact); copy it again from the split folder")

    def write(tmp: Path) -> None:
        whole = hashlib.sha256()
        with open(tmp, "wb") as dst:
            for part in manifest["parts"]:
                with open(folder / part["name"], "rb") as src:
                    for block in iter(lambda: src.read(_CHUNK), b""):
                        whole.update(block)
                        dst.write(block)
        if whole.hexdigest() != manifest["sha256"]:
            raise UserError(f"the joined {manifest['name']} has SHA-256 {whole.hexdigest()[:12]}..., the manifest "
                            f"{manifest['sha256'][:12]}...; split the file again")

    return atomic_write(out, write)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m real_runs.parts", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("split", help="cut FILE into parts with a manifest in DIR")
    s.add_argument("file")
    s.add_argument("folder")
    s.add_argument("--part-mb", type=float, default=60.0)
    st = sub.add_parser("status", help="which parts of DIR's manifest are there and intact")
    st.add_argument("folder")
    j = sub.add_parser("join", help="check DIR's parts and write the whole file to OUTFILE")
    j.add_argument("folder")
    j.add_argument("out")
    args = parser.parse_args(argv)
    try:
        if args.command == "split":
            manifest = split(args.file, args.folder, args.part_mb)
            parts = read_manifest(args.folder)["parts"]
            print(f"{len(parts)} parts of {args.file} in {args.folder} ({', '.join(p['name'] for p in parts)}); "
                  f"manifest {manifest.name}")
        elif args.command == "status":
            states = status(args.folder)
            for name, state in states:
                print(f"{name}: {state}")
            return 0 if all(s == "ok" for _, s in states) else 1
        else:
            manifest = read_manifest(args.folder)
            join(args.folder, args.out)
            print(f"{args.out}: {manifest['size']} bytes, SHA-256 {manifest['sha256']} (checked)")
    except UserError as exc:
        print(f"error: {exc}".splitlines()[0], file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
