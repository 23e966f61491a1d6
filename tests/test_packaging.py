"""Packaging: the config folder an install reads, and extras any pip can install. (.ci/run builds
the wheel, installs it in a clean virtualenv and runs a case from an empty folder.)"""

from __future__ import annotations

import re

import pytest

from popfair.runtime import paths
from tests.test_cli import ROOT


def test_a_source_checkout_reads_its_own_conf():
    assert paths.CONF_DIR == ROOT / "conf"


def test_an_installed_package_reads_the_conf_inside_it(tmp_path, monkeypatch):
    checkout_conf, wheel_conf = tmp_path / "conf", tmp_path / "popfair" / "conf"
    for folder in (checkout_conf, wheel_conf):
        folder.mkdir(parents=True)
        (folder / "config.yaml").write_text("seed: 0\n")
    monkeypatch.setattr(paths, "PACKAGE_DIR", tmp_path / "popfair")
    assert paths.find_conf_dir() == wheel_conf
    (wheel_conf / "config.yaml").unlink()
    assert paths.find_conf_dir() == checkout_conf
    (checkout_conf / "config.yaml").unlink()
    with pytest.raises(FileNotFoundError, match="config folder is missing"):
        paths.find_conf_dir()


def test_extra_names_need_no_normalization():
    """pip before 23.3 (a fresh venv's) does not match `hf_local` to the normalized `hf-local`."""
    section = (ROOT / "pyproject.toml").read_text().split("[project.optional-dependencies]")[1].split("\n[")[0]
    extras = re.findall(r"^([^#\s][^=\s]*)\s*=", section, flags=re.M)  # (tomllib is 3.11+; popfair runs on 3.10)
    assert "hflocal" in extras
    assert all(re.fullmatch(r"[a-z0-9]+", name) for name in extras), sorted(extras)
    readme = (ROOT / "README.md").read_text()
    for used in re.findall(r'pip install -e "\.\[([^\]]+)\]"', readme):
        assert set(used.split(",")) <= set(extras), used
