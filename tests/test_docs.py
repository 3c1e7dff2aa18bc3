"""The documentation: the site builds strictly (broken links, missing pages, API references to
names that do not exist all fail), and every relative link in the README points at a file."""

import os
import re
import subprocess
import sys

import pytest

from conftest import REPO


def test_the_docs_site_builds_strictly(tmp_path):
    pytest.importorskip("mkdocstrings", reason="the docs extra is not installed")
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                            cwd=REPO, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert (tmp_path / "site" / "tutorials" / "add-a-head" / "index.html").exists()
    api = (tmp_path / "site" / "api" / "heads" / "index.html").read_text()
    assert "log_ratio" in api and "LaplaceHead" not in api  # rendered from the docstrings
    tutorial = re.sub(r"<[^>]+>", "", (tmp_path / "site" / "tutorials" / "add-a-head" / "index.html").read_text())
    assert "class LaplaceHead(PolicyHead):" in tutorial  # the tested example file is included, not a copy


def test_every_relative_link_in_the_readme_exists():
    links = re.findall(r"\]\(([^)#]+)\)", (REPO / "README.md").read_text())
    relative = [link for link in links if "://" not in link]
    assert len(relative) >= 10
    missing = [link for link in relative if not (REPO / link).exists()]
    assert not missing, missing
