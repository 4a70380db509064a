"""index.html read in headless Chromium: one screen first, no table wider than a 1400 px window."""
import pytest

import reports


@pytest.fixture(scope="module")
def wide_report(tmp_path_factory):
    """Many seeds (a wide per-seed table), long policy names, two suites."""
    from reports_synth import make_synthetic

    effects = {"baseline-policy": 0.0, "harnessbandit[tau=0.3,alpha=0.5]": 0.6, "learnability[window=32]": -0.2,
               "mixed-all": 0.1}
    ev, tr = make_synthetic(effects, n_seeds=16, n_tasks=(24, 12), eval_steps=(6, 12))
    out = tmp_path_factory.mktemp("page") / "report"
    reports.build_report((ev, tr), "baseline-policy", out, resamples=200, seed=0)
    return out


@pytest.mark.slow
def test_no_table_is_wider_than_the_page_and_the_top_is_one_screen(wide_report, tmp_path):
    from reports_browser import measure

    m = measure(wide_report / "index.html", tmp_path)
    assert m["inner_width"] == 1400
    assert m["scroll_width"] <= 1400, m  # nothing sticks out of the page, every group open
    assert len(m["tables"]) >= 20
    too_wide = [t for t in m["tables"] if t["right"] > 1400 or t["width"] > t["room"]]
    assert not too_wide, too_wide
    # the conclusion, the figure and the compact table fit the first 1400 x 900 screen
    assert 0 < m["first_table_bottom"] <= 900, m["first_table_bottom"]
    assert m["height_closed"] < 2500 < m["height_open"]


@pytest.mark.slow
def test_screenshot_of_the_top_is_not_blank(wide_report, tmp_path):
    import matplotlib.image as mpimg
    import numpy as np
    from reports_browser import screenshot

    img = mpimg.imread(screenshot(wide_report / "index.html", tmp_path / "top.png", tmp_path))
    assert img.shape[:2] == (900, 1400)
    assert float(np.var(img[..., :3])) > 1e-3
