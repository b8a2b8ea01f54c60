"""The docs site builds with warnings as errors: a page the navigation names but nobody wrote,
a broken link between pages, or an API entry naming a function that was renamed or removed
fails the build (mkdocs.yml: strict)."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MKDOCS = Path(sys.executable).parent / "mkdocs"
pytestmark = pytest.mark.skipif(not MKDOCS.exists(), reason="mkdocs is not installed: `make test` installs the docs extra")


def build(folder: Path, api_edit=lambda text: text) -> subprocess.CompletedProcess:
    """The site built from a copy of docs/ (its API page edited by `api_edit`) into folder/site."""
    shutil.copytree(ROOT / "docs", folder / "docs")
    shutil.copy(ROOT / "mkdocs.yml", folder)
    os.symlink(ROOT / "tensortune", folder / "tensortune")  # the API pages read the docstrings
    api = folder / "docs" / "api.md"
    api.write_text(api_edit(api.read_text()))
    return subprocess.run([str(MKDOCS), "build", "--strict", "--site-dir", str(folder / "site")], cwd=folder,
                          capture_output=True, text=True, timeout=120, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})


def test_the_docs_site_builds_strictly_with_the_api_from_docstrings(tmp_path):
    done = build(tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Build with the best schedules" in (tmp_path / "site" / "api" / "index.html").read_text()


def test_a_renamed_function_breaks_the_docs_build(tmp_path):
    done = build(tmp_path, lambda text: text.replace("tensortune.model.build.build_model\n", "tensortune.model.build.build_it\n"))
    assert done.returncode != 0 and "build_it" in done.stderr
