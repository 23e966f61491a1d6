"""Packages: popfair and its subpackages, plus the top-level conf/ shipped inside the wheel as
popfair.conf (with one package per config group), so an installed popfair reads the same config
files as a source checkout (popfair.config.CONF_DIR). Everything else is in pyproject.toml."""
from setuptools import find_namespace_packages, setup

CONF = ["popfair.conf", *(f"popfair.conf.{name}" for name in find_namespace_packages(where="conf"))]

setup(packages=[*find_namespace_packages(include=["popfair*"]), *CONF], package_dir={"popfair.conf": "conf"})
