"""The README's two pictures, regenerated: the report's first screen and the stress profile.

    python scripts/readme_figures.py                          # runs `hb demo` and `hb stress --quick` first
    python scripts/readme_figures.py --demo runs/demo --stress runs/stress   # reuse finished folders

Writes OUT/report.png (default OUT = docs/img) and OUT/stress_profile.png:

* report.png: the first screen (1400 x 900, the window `tests/reports/test_reports_page.py`
  checks) of DEMO/report/index.html, shot by headless Chromium when one is installed
  (`apt-get install -y chromium`); without it, the headline figure the report already wrote
  (DEMO/report/figures/headline.png).
* stress_profile.png: the profile's heatmap, one panel per axis (horizon 1x and 3x, step size
  x1 and x0.5), that `hb stress` wrote (STRESS/stress/figures/share.png); when that is
  missing, drawn again from STRESS/stress/profile.csv by the same functions
  (`reports.stress.heatmap_panels`, `reports.figures.share_panels`; matplotlib only).

The commands run through `python -m hbsim.cli` of this interpreter, so a checkout's code is
what is pictured (put the checkout on PYTHONPATH). Progress goes to stderr; the last lines
of stdout say which file came from where.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WINDOW = (1400, 900)            # the report's first screen, as its page test opens it
BROWSERS = ("chromium", "chromium-browser", "google-chrome")


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--demo", type=Path, help="a finished `hb demo --out` folder (default: run hb demo)")
    parser.add_argument("--stress", type=Path, help="a finished `hb stress --out` folder (default: run hb stress --quick)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img", help="where the PNGs go (default docs/img)")
    parser.add_argument("--work", type=Path, default=ROOT / "runs" / "readme",
                        help="where the commands write when a folder is not given (default runs/readme)")
    parser.add_argument("--jobs", default="2", help="--jobs of the commands run (default 2)")
    args = parser.parse_args(argv)
    demo, stress = args.demo, args.stress
    if demo is None:
        demo = args.work / "demo"
        hb("demo", "--out", str(demo), "--jobs", args.jobs)
    if stress is None:
        stress = args.work / "stress"
        hb("stress", "--quick", "--out", str(stress), "--jobs", args.jobs)
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"{args.out / 'report.png'} <- {report_screen(demo, args.out / 'report.png')}")
    print(f"{args.out / 'stress_profile.png'} <- {stress_profile(stress, args.out / 'stress_profile.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
