"""scripts/readme_figures.py without a browser or a run: where each README picture comes from."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def figures_script():
    spec = importlib.util.spec_from_file_location("scripts_readme_figures", ROOT / "scripts" / "readme_figures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def profile_csv(folder: Path) -> None:
    """A two-scenario, two-policy profile.csv in the columns `hb stress` writes."""
    (folder / "stress").mkdir(parents=True)
    rows = [dict(scenario=s, target="train", policy=p, seeds=4, delta=0.01, delta_t95=0.02, gap=0.1, gap_p=0.01,
                 share=share, share_lo=share - 0.1, share_hi=share + 0.1, p=0.01, p_signflip=0.125, q=q)
            for s, p, share, q in [("trap", "mixed", 0.35, 0.5), ("trap", "harnessbandit", 0.6, 0.01),
                                   ("dead", "mixed", 0.96, 0.01), ("dead", "harnessbandit", 0.03, 0.9)]]
    pd.DataFrame(rows).to_csv(folder / "stress" / "profile.csv", index=False)


def test_the_profile_is_the_heatmap_hb_stress_wrote(figures_script, tmp_path):
    (tmp_path / "stress" / "figures").mkdir(parents=True)
    (tmp_path / "stress" / "figures" / "share.png").write_bytes(b"\x89PNG the heatmap")
    source = figures_script.stress_profile(tmp_path, tmp_path / "out.png")
    assert (tmp_path / "out.png").read_bytes() == b"\x89PNG the heatmap" and source.endswith("share.png")


def test_without_the_heatmap_the_profile_is_drawn_again_from_its_csv(figures_script, tmp_path):
    profile_csv(tmp_path)
    source = figures_script.stress_profile(tmp_path, tmp_path / "out.png")
    assert source.endswith("(drawn again)")
    assert (tmp_path / "out.png").read_bytes()[:4] == b"\x89PNG"


def test_without_a_browser_the_report_screen_is_the_headline_figure(figures_script, tmp_path, monkeypatch):
    monkeypatch.setattr(figures_script, "browser", lambda: None)
    (tmp_path / "report" / "figures").mkdir(parents=True)
    (tmp_path / "report" / "index.html").write_text("<html></html>")
    (tmp_path / "report" / "figures" / "headline.png").write_bytes(b"\x89PNG headline")
    source = figures_script.report_screen(tmp_path, tmp_path / "out.png")
    assert (tmp_path / "out.png").read_bytes() == b"\x89PNG headline" and "no browser" in source


def test_a_folder_without_a_report_or_profile_is_refused_naming_the_command(figures_script, tmp_path):
    with pytest.raises(SystemExit, match="hb demo --out"):
        figures_script.report_screen(tmp_path, tmp_path / "out.png")
    with pytest.raises(SystemExit, match="hb stress --quick --out"):
        figures_script.stress_profile(tmp_path, tmp_path / "out.png")
