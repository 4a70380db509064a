"""The README's two pictures and the docs' measured examples, regenerated: the report's first
screen, the stress profile, the trap example and the profile's reading.

    python scripts/readme_figures.py                          # runs `hb demo` and `hb stress --quick` first
    python scripts/readme_figures.py --demo runs/demo --stress runs/stress   # reuse finished folders
    python scripts/readme_figures.py --only trap,profile --profile runs/stress-full   # the texts only

Writes OUT/report.png (default OUT = docs/img) and OUT/stress_profile.png, and rewrites the
marked blocks (`<!-- readme_figures:NAME -->` ... `<!-- /readme_figures:NAME -->`) of the docs:

* report.png: the first screen (1400 x 900, the window `tests/reports/test_reports_page.py`
  checks) of DEMO/report/index.html, shot by headless Chromium when one is installed
  (`apt-get install -y chromium`); without it, the headline figure the report already wrote
  (DEMO/report/figures/headline.png).
* stress_profile.png: the profile's heatmap, one panel per axis (horizon 1x and 3x, step size
  x1 and x0.5), that `hb stress` wrote (STRESS/stress/figures/share.png); when that is
  missing, drawn again from STRESS/stress/profile.csv by the same functions
  (`reports.stress.heatmap_panels`, `reports.figures.share_panels`; matplotlib only).
* trap (README.md, docs/SCENARIOS.md): the output of `hb TRAP` (below), whole in
  docs/SCENARIOS.md, its columns cut in the README.
* profile (docs/SCENARIOS.md): the reading and the table of PROFILE/stress/profile.md, the
  profile of a finished `hb stress` (`--profile DIR`, default the --stress folder).

The commands run through `python -m hbsim.cli` of this interpreter, so a checkout's code is
what is pictured (put the checkout on PYTHONPATH). Progress goes to stderr; the last lines
of stdout say which file came from where.
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from policies.validate import comma_items

ROOT = Path(__file__).resolve().parent.parent
WINDOW = (1400, 900)            # the report's first screen, as its page test opens it
BROWSERS = ("chromium", "chromium-browser", "google-chrome")
#: the trap example's command (README.md and docs/SCENARIOS.md show it and its output)
TRAP = ("sim", "--scenario", "trap", "--policy", "harnessbandit", "--policy", "oracle", "--policy", "uniform",
        "--seeds", "6")
PARTS = ("report", "stress", "trap", "profile")


def hb(*args: str) -> None:
    """Run one `hb` command of this interpreter; stop on failure."""
    print("readme_figures: hb " + " ".join(args), file=sys.stderr)
    subprocess.run([sys.executable, "-m", "hbsim.cli", *args], check=True, stdout=subprocess.DEVNULL)


def browser() -> str | None:
    """The first headless-capable browser on PATH, or None."""
    return next((path for name in BROWSERS if (path := shutil.which(name))), None)


def report_screen(demo: Path, out: Path) -> str:
    """out <- the first screen of demo/report/index.html; returns where it came from."""
    index = demo / "report" / "index.html"
    if not index.is_file():
        raise SystemExit(f"readme_figures: no report at {index}: run `hb demo --out {demo}` first")
    exe = browser()
    if exe is not None:
        with tempfile.TemporaryDirectory(prefix="hb-readme-chromium-") as profile:
            subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                            f"--user-data-dir={profile}", f"--window-size={WINDOW[0]},{WINDOW[1]}",
                            f"--screenshot={out}", index.as_uri()],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
        if out.is_file() and out.stat().st_size > 0:
            return f"{exe} screenshot of {index}"
    headline = demo / "report" / "figures" / "headline.png"
    if not headline.is_file():
        raise SystemExit(f"readme_figures: no browser on PATH ({', '.join(BROWSERS)}) and no {headline}")
    shutil.copyfile(headline, out)
    return f"{headline} (no browser: the report's headline figure)"


def stress_profile(stress: Path, out: Path) -> str:
    """out <- the stress profile's heatmap; returns where it came from."""
    figure = stress / "stress" / "figures" / "share.png"
    if figure.is_file():
        shutil.copyfile(figure, out)
        return str(figure)
    table = stress / "stress" / "profile.csv"
    if not table.is_file():
        raise SystemExit(f"readme_figures: no profile at {table}: run `hb stress --quick --out {stress}` first")
    import matplotlib
    matplotlib.use("Agg")
    import pandas as pd

    from reports import figures
    from reports import stress as profile
    prof = pd.read_csv(table, keep_default_na=False, na_values=[""])
    fig, _ = figures.share_panels(profile.heatmap_panels(prof), profile.FIGURE_TITLE)
    figures.save(fig, out)
    return f"{table} (drawn again)"


def hb_output(*args: str) -> str:
    """The stdout of one `hb` command of this interpreter; stop on failure."""
    print("readme_figures: hb " + " ".join(args), file=sys.stderr)
    return subprocess.run([sys.executable, "-m", "hbsim.cli", *args], check=True, capture_output=True,
                          text=True).stdout


def _spans(rule: str) -> list[tuple[int, int]]:
    """The (start, end) of each column of a text table, from its rule line (`-----  ---`)."""
    return [(m.start(), m.end()) for m in re.finditer(r"-+", rule)]


def cut_columns(text: str, keep_left: int = 3, keep_right: int = 3) -> str:
    """`hb sim`'s output in the README's form: the per-policy table (up to its first blank line)
    with its middle columns cut to `...` and without its rule, then the share lines without
    their legend and rules."""
    lines = text.strip("\n").splitlines()
    spans = _spans(lines[1])                      # the table's rule, under its header
    left, right = spans[keep_left - 1][1], spans[-keep_right][0]
    end = lines.index("", 2) if "" in lines[2:] else len(lines)
    out = [line[:left] + "  ...  " + line[right:] for i, line in enumerate(lines[:end]) if i != 1]
    out += [line for line in lines[end:] if line.strip() and not line.startswith("share of the achievable gain")
            and set(line.strip()) - {"-", " "}]
    return "\n".join(line.rstrip() for line in out)


def replace_block(path: Path, name: str, body: str) -> None:
    """Rewrite the text between `<!-- readme_figures:NAME -->` and `<!-- /readme_figures:NAME -->`
    of `path`; stop when the markers are missing."""
    start, end = f"<!-- readme_figures:{name} -->", f"<!-- /readme_figures:{name} -->"
    text = path.read_text()
    if text.count(start) != 1 or text.count(end) != 1 or text.index(start) > text.index(end):
        raise SystemExit(f"readme_figures: {path} has no single block {start} ... {end}")
    head, rest = text.split(start, 1)
    path.write_text(head + start + "\n" + body.strip("\n") + "\n" + end + rest.split(end, 1)[1])


def trap_example(docs: Path) -> str:
    """The trap example's output into README.md (columns cut) and docs/SCENARIOS.md (whole)."""
    full = hb_output(*TRAP)
    table = full.strip("\n")
    replace_block(docs.parent / "README.md", "trap", "```\n" + cut_columns(table) + "\n```")
    replace_block(docs / "SCENARIOS.md", "trap", "```\n" + table + "\n```")
    return "hb " + " ".join(TRAP)


def profile_text(stress: Path, docs: Path) -> str:
    """The reading and the table of STRESS/stress/profile.md into docs/SCENARIOS.md, after a
    line naming the command that made it and its size (from the folder's marker and profile.csv)."""
    import pandas as pd

    from hbsim.contract.markers import read_marker
    md, csv = stress / "stress" / "profile.md", stress / "stress" / "profile.csv"
    if not md.is_file() or not csv.is_file():
        raise SystemExit(f"readme_figures: no profile at {md}: run `hb stress --out {stress}` first")
    prof = pd.read_csv(csv)
    command = (read_marker(stress) or {}).get("command", "hb stress")
    axes = prof[["horizon", "step_scale"]].drop_duplicates().shape[0]
    designs = sorted(set(prof["policy"]) - {"oracle", "best_fixed"})
    seeds = "-".join(str(n) for n in sorted({int(n) for n in prof["seeds"]}))
    head = (f"Measured by `{command}` {prof['scenario'].nunique()} scenarios x {axes} "
            f"ax{'is' if axes == 1 else 'es'}, {seeds} seeds, {len(designs)} designs against `uniform`. "
            "`*` = captures >= 50% (q_half < 0.05), `v` = falls below uniform (q < 0.05); the reference per row; "
            "`no share` where the reference's own gain over uniform is not significant:")
    lines = [line for line in md.read_text().splitlines() if not line.startswith(("# ", "!["))]
    reading, _, table = "\n".join(lines).strip("\n").partition("\n|")
    replace_block(docs / "SCENARIOS.md", "profile", head + "\n\n> " + reading.strip() + "\n\n|" + table)
    return str(md)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--demo", type=Path, help="a finished `hb demo --out` folder (default: run hb demo)")
    parser.add_argument("--stress", type=Path, help="a finished `hb stress --out` folder (default: run hb stress --quick)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img", help="where the PNGs go (default docs/img)")
    parser.add_argument("--work", type=Path, default=ROOT / "runs" / "readme",
                        help="where the commands write when a folder is not given (default runs/readme)")
    parser.add_argument("--jobs", default="2", help="--jobs of the commands run (default 2)")
    parser.add_argument("--profile", type=Path,
                        help="a finished `hb stress --out` folder whose reading and table go into docs/SCENARIOS.md "
                             "(default: the --stress folder)")
    parser.add_argument("--only", default=",".join(PARTS),
                        help=f"comma-separated parts to regenerate (default all: {','.join(PARTS)})")
    parser.add_argument("--docs", type=Path, default=ROOT / "docs", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    only = comma_items(args.only)
    if not only or set(only) - set(PARTS):
        parser.error(f"--only {args.only!r}: allowed: a comma-separated list of {', '.join(PARTS)}")
    demo, stress = args.demo, args.stress
    if demo is None and "report" in only:
        demo = args.work / "demo"
        hb("demo", "--out", str(demo), "--jobs", args.jobs)
    if stress is None and ("stress" in only or ("profile" in only and args.profile is None)):
        stress = args.work / "stress"
        hb("stress", "--quick", "--out", str(stress), "--jobs", args.jobs)
    args.out.mkdir(parents=True, exist_ok=True)
    if "report" in only:
        print(f"{args.out / 'report.png'} <- {report_screen(demo, args.out / 'report.png')}")
    if "stress" in only:
        print(f"{args.out / 'stress_profile.png'} <- {stress_profile(stress, args.out / 'stress_profile.png')}")
    if "trap" in only:
        print(f"README.md, {args.docs / 'SCENARIOS.md'} (trap) <- {trap_example(args.docs)}")
    if "profile" in only:
        print(f"{args.docs / 'SCENARIOS.md'} (profile) <- {profile_text(args.profile or stress, args.docs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
