"""Packages: popfair and its subpackages, plus the top-level conf/ shipped inside the wheel as
popfair.conf (with one package per config group), so an installed popfair reads the same config
files as a source checkout (popfair.config.CONF_DIR), and the Hydra sweeper and launcher plugins (Hydra finds
plugins in the hydra_plugins namespace package). Everything else is in pyproject.toml."""

from setuptools import find_namespace_packages, setup

CONF = ["popfair.conf", *(f"popfair.conf.{name}" for name in find_namespace_packages(where="conf"))]

PACKAGES = [*find_namespace_packages(include=["popfair*", "hydra_plugins.popfair_sweeper", "hydra_plugins.popfair_launcher"]), *CONF]

setup(packages=PACKAGES, package_dir={"popfair.conf": "conf"})
