"""`hb policies`: list every registered policy with a one-line description and its default knobs."""
from __future__ import annotations

import argparse
import json

from policies.registry import POLICIES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print name -> {summary, knobs} as JSON")


def main(args: argparse.Namespace) -> int:
    table = {name: {"summary": cls.summary, "knobs": cls.knobs()} for name, cls in POLICIES.items()}
    if args.json:
        print(json.dumps(table, indent=2))
        return 0
    width = max(len(n) for n in table)
    for name, info in table.items():
        print(f"{name:<{width}}  {info['summary']}")
        knobs = ", ".join(f"{k}={v!r}" for k, v in info["knobs"].items()) or "(no knobs)"
        print(f"{'':<{width}}    knobs: {knobs}")
    return 0
