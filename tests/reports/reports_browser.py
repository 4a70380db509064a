"""Headless Chromium for the report tests (no playwright): a screenshot, and the page's
measured widths through a copy of the page with a script that writes them into the DOM,
read back with --dump-dom. A helper module with a unique name (imported by name through
pyproject's pythonpath). Chromium is installed by `make venv` (the Makefile's set-up);
missing on CI it fails the test, elsewhere it skips."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]

#: opens every <details>, then records the page's widths and heights into <pre id="hb-measure">
MEASURE_JS = """<script>
(function(){var d=document.documentElement,r={inner_width:window.innerWidth,height_closed:d.scrollHeight};
var first=document.querySelector('table');r.first_table_bottom=first?Math.round(first.getBoundingClientRect().bottom):0;
document.querySelectorAll('details').forEach(function(e){e.open=true;});
r.scroll_width=d.scrollWidth;r.height_open=d.scrollHeight;
r.tables=[].map.call(document.querySelectorAll('table'),function(t){var b=t.getBoundingClientRect();
return {right:Math.round(b.right),width:Math.round(b.width),room:t.parentElement.clientWidth};});
var p=document.createElement('pre');p.id='hb-measure';p.textContent=JSON.stringify(r);document.body.appendChild(p);})();
</script>"""


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail("chromium is not installed on CI: `make venv` installs it (apt-get install -y chromium)")
    pytest.skip("chromium not installed: `make venv` installs it as root (apt-get install -y chromium)")


def _run(args, tmp: Path, text: bool = False):
    exe = chromium()
    return subprocess.run([exe, *FLAGS, f"--user-data-dir={tmp / 'chromium-profile'}", *args], capture_output=True,
                          text=text, timeout=180, check=False)


def screenshot(index: Path, png: Path, tmp: Path, width: int = 1400, height: int = 900) -> Path:
    _run([f"--window-size={width},{height}", "--hide-scrollbars", f"--screenshot={png}", index.as_uri()], tmp)
    assert png.exists(), "chromium wrote no screenshot"
    return png


def dump_dom(index: Path, tmp: Path, width: int = 1400, height: int = 900) -> str:
    return _run([f"--window-size={width},{height}", "--dump-dom", index.as_uri()], tmp, text=True).stdout


def measure(index: Path, tmp: Path, width: int = 1400, height: int = 900) -> dict:
    """Widths (px) at a width x height window: inner_width, scroll_width (every <details>
    open), tables [{right, width, room: the parent's client width}], heights closed/open,
    and the bottom of the first table with everything closed."""
    copy = tmp / f"measured-{index.name}"
    copy.write_text(index.read_text().replace("</body>", MEASURE_JS + "</body>"))
    dom = dump_dom(copy, tmp, width, height)
    found = re.search(r'<pre id="hb-measure">([^<]*)</pre>', dom)
    assert found, f"the measuring script did not run: {dom[:300]!r}"
    return json.loads(found.group(1))
