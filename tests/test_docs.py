"""The documentation site: the strict build passes, and fails on a broken link or API reference.

The strict build runs as a user runs it (`python -m mkdocs build --strict`), writing the
site to a temporary folder. The failing builds run on a temporary copy of the site's
sources with one page broken, and must fail naming what is broken.
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]


def _build(config: Path, site: Path) -> subprocess.CompletedProcess:
    command = ["mkdocs", "build", "--strict", "-f", os.fspath(config), "-d", os.fspath(site)]
    return subprocess.run(
        [sys.executable, "-m", *command],
        cwd=config.parent,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_site_builds_strictly_with_every_api_page(tmp_path):
    completed = _build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert completed.returncode == 0, completed.stderr[-4000:]
    api = (tmp_path / "site" / "api" / "layers" / "index.html").read_text()
    assert 'id="keras_fourier.layers.GlobalFilter"' in api
    models = (tmp_path / "site" / "api" / "models" / "index.html").read_text()
    assert 'id="keras_fourier.models.builder.build_model"' in models
    # Doctest examples render as code, Sphinx roles as names (docs/griffe_docstrings.py).
    assert '<span class="gp">&gt;&gt;&gt; </span>' in api
    assert ":func:" not in api and "<code>keras_fourier.layers.spectral</code>" in api
    assert (tmp_path / "site" / "scaling_cpu2.png").exists()


# Each broken line, and the name the build's log must give. The warnings of one build are all
# reported before strict mode aborts it; a missing API object stops the build at once.
BROKEN = {
    "links": {
        "[gone](nowhere.md)": "nowhere.md",
        "[gone](layers.md#no-such-section)": "no-such-section",
        "[NoSuchLayer][keras_fourier.layers.NoSuchLayer]": "keras_fourier.layers.NoSuchLayer",
    },
    "api": {"::: keras_fourier.layers.NoSuchLayer": "keras_fourier.layers.NoSuchLayer"},
}


@pytest.mark.parametrize("broken", sorted(BROKEN))
def test_the_strict_build_fails_naming_a_broken(broken, tmp_path):
    copy = tmp_path / "copy"
    copy.mkdir()
    shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
    shutil.copytree(ROOT / "docs", copy / "docs")
    (copy / "keras_fourier").symlink_to(ROOT / "keras_fourier")
    page = copy / "docs" / "development.md"
    page.write_text(page.read_text() + "".join(f"\n\n{line}\n" for line in BROKEN[broken]))
    completed = _build(copy / "mkdocs.yml", tmp_path / "site")
    assert completed.returncode != 0, completed.stderr[-4000:]
    for named in BROKEN[broken].values():
        assert named in completed.stderr, completed.stderr[-4000:]


def test_readme_links_to_files_that_exist():
    readme = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)\s]+)\)", readme)
    local = [target.split("#")[0] for target in targets if "://" not in target]
    assert "docs/extending.md" in local and "docs/main_job_history.png" in local
    assert [target for target in local if not (ROOT / target).is_file()] == []
