"""Where popfair's config files are.

The repository keeps them in the top-level `conf/`. A wheel ships the same folder inside the
package as `popfair/conf` (setup.py maps conf/ to the package popfair.conf). A source checkout
(`PYTHONPATH=$PWD python -m popfair`, pytest) and an editable install have no `popfair/conf`, so
they read `conf/` beside the package: the files of that checkout, never another install's."""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


def find_conf_dir() -> Path:
    """`popfair/conf` of an installed wheel, else `conf/` of the source checkout holding the package."""
    candidates = (PACKAGE_DIR / "conf", PACKAGE_DIR.parent / "conf")
    for candidate in candidates:
        if (candidate / "config.yaml").is_file():
            return candidate
    raise FileNotFoundError(
        f"popfair's config folder is missing: no config.yaml in {' or '.join(map(str, candidates))} "
        "(reinstall popfair, or run from a checkout that has conf/)"
    )


CONF_DIR = find_conf_dir()
