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
    """A two-scenario, two-policy profile.csv on the four axes, in the columns `hb stress` writes
    (a cell without a share, and verdicts, among them)."""
    from reports.stress import COLUMNS
    (folder / "stress").mkdir(parents=True)
    rows = [dict(scenario=s, policy=p, horizon=h, step_scale=lr, share=share, share_low=share - 0.1,
                 share_high=share + 0.1, reference="oracle", target="train", steps=100 * h, seeds=4, delta=0.01,
                 delta_t95=0.02, gap=0.1, gap_p=0.01, p=0.01, p_signflip=0.125, q=0.01, p_half=0.01, q_half=0.01,
                 verdict=verdict, note="")
            for h in (1, 3) for lr in (1.0, 0.5)
            for s, p, share, verdict in [("trap", "mixed", 0.35, ""), ("trap", "harnessbandit", 0.6, "half"),
                                         ("dead", "mixed", 0.96 if h == 1 else float("nan"), "half"),
                                         ("dead", "harnessbandit", 0.03, "")]]
    pd.DataFrame(rows, columns=COLUMNS).to_csv(folder / "stress" / "profile.csv", index=False)


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
    from reports.stress import heatmap_panels
    panels = heatmap_panels(pd.read_csv(tmp_path / "stress" / "profile.csv", keep_default_na=False, na_values=[""]))
    assert list(panels) == ["horizon 1x, step size x1", "horizon 1x, step size x0.5", "horizon 3x, step size x1",
                            "horizon 3x, step size x0.5"]                       # one panel per axis
    share, marks = panels["horizon 3x, step size x1"]
    assert share.index.tolist() == ["trap", "dead"] and share.columns.tolist() == ["mixed", "harnessbandit"]
    assert share.loc["trap", "harnessbandit"] == 0.6 and pd.isna(share.loc["dead", "mixed"])
    assert marks.loc["trap", "harnessbandit"] and not marks.loc["trap", "mixed"]


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


SIM_OUTPUT = """policy  seeds  heldout_tasks  regret  oracle%  gen/opt  visits a/b
------  -----  -------------  ------  -------  -------  ----------
hb      6      0.772 ± 0.037  0.5     19%      2.62     20/13
uniform 6      0.644 ± 0.055  0.8     18%      2.46     18/22

share of the achievable gain = (policy - uniform) / (reference - uniform), [a long legend]
  train: reference = 'oracle' (gap +0.156 over 'uniform')
policy  train: delta | share
------  ------------------
hb      +0.125 ± 0.069 | 0.80 [0.52, 1.07]
"""


def test_the_readme_trap_example_cuts_the_middle_columns_and_the_rules(figures_script):
    assert figures_script.cut_columns(SIM_OUTPUT, keep_left=2, keep_right=2) == "\n".join([
        "policy  seeds  ...  gen/opt  visits a/b",
        "hb      6      ...  2.62     20/13",
        "uniform 6      ...  2.46     18/22",
        "  train: reference = 'oracle' (gap +0.156 over 'uniform')",
        "policy  train: delta | share",
        "hb      +0.125 ± 0.069 | 0.80 [0.52, 1.07]"])


def test_a_marked_block_is_rewritten_and_nothing_else(figures_script, tmp_path):
    page = tmp_path / "page.md"
    page.write_text("intro\n<!-- readme_figures:x -->\nold\nlines\n<!-- /readme_figures:x -->\nrest\n")
    figures_script.replace_block(page, "x", "\nnew\n")
    assert page.read_text() == "intro\n<!-- readme_figures:x -->\nnew\n<!-- /readme_figures:x -->\nrest\n"
    with pytest.raises(SystemExit, match="no single block <!-- readme_figures:y -->"):
        figures_script.replace_block(page, "y", "z")
    assert page.read_text().count("new") == 1


def test_the_profile_block_is_the_reading_and_table_of_profile_md(figures_script, tmp_path):
    profile_csv(tmp_path)
    (tmp_path / "stress" / "profile.md").write_text("# hb stress: title\n\nOn every axis: the reading.\n\n"
                                                    "![share](figures/share.png)\n\n| a | b |\n|---|---|\n| 1 | 2 |\n")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "SCENARIOS.md").write_text("x\n<!-- readme_figures:profile -->\n<!-- /readme_figures:profile -->\ny\n")
    assert figures_script.profile_text(tmp_path, docs).endswith("profile.md")
    text = (docs / "SCENARIOS.md").read_text()
    assert "Measured by `hb stress` 2 scenarios x 4 axes, 4 seeds, 2 designs against `uniform`." in text
    assert "\n\n> On every axis: the reading.\n\n| a | b |\n|---|---|\n| 1 | 2 |\n<!-- /readme_figures:profile -->\ny\n" in text
    with pytest.raises(SystemExit, match="hb stress --out"):
        figures_script.profile_text(tmp_path / "none", docs)
