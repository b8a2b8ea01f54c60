"""Opening an HTML file in a real headless browser (Debian's chromium; `make test` installs it
where it may): the DOM after loading, what the page wrote to the console, and a screenshot,
kept under test-artifacts/ to look at after the run."""
from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

ARTIFACTS = Path(__file__).parent.parent / "test-artifacts"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run",
         "--hide-scrollbars"]


def chromium() -> str:
    """The browser's path; the calling test skips, saying how to get it, where there is none."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.skip("no headless browser: apt-get install chromium (make test installs it as root)")
    return found


def open_page(page: Path, screenshot_name: str) -> tuple[str, list[str], Path]:
    """(the DOM once loaded, the console's messages, the screenshot's path) of `page`."""
    browser = chromium()
    with tempfile.TemporaryDirectory() as profile:
        loaded = subprocess.run([browser, *FLAGS, f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
                                 "--dump-dom", page.resolve().as_uri()], capture_output=True, text=True, timeout=120)
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    console = re.findall(r":CONSOLE[^\]]*\] (.*)", loaded.stderr)
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / screenshot_name
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run([browser, *FLAGS, f"--user-data-dir={profile}", "--window-size=1200,3000",
                        f"--screenshot={shot}", page.resolve().as_uri()], capture_output=True, timeout=120, check=True)
    return loaded.stdout, console, shot


def figures(dom: str) -> dict[str, int]:
    """Figure id -> how many drawn SVG paths it holds."""
    found = {}
    for name, body in re.findall(r'<figure id="([\w-]+)">(.*?)</figure>', dom, re.S):
        found[name] = len(re.findall(r"<path ", body)) if "<svg" in body else 0
    return found


def colours(png: Path) -> int:
    """Distinct colours in the screenshot (a blank or failed page has a handful)."""
    from PIL import Image

    with Image.open(png) as image:
        return len(image.convert("RGB").getcolors(maxcolors=1 << 20) or [])
