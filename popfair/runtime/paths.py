"""Where popfair's config files are.

The repository keeps them in the top-level `conf/`. A wheel ships the same folder inside the
package as `popfair/conf` (setup.py maps conf/ to the package popfair.conf). A source checkout
(`PYTHONPATH=$PWD python -m popfair`, pytest) and an editable install have no `popfair/conf`, so
they read `conf/` beside the package: the files of that checkout, never another install's."""

from __future__ import annotations

import warnings
from pathlib import Path

# conf/hydra/launcher/joblib.yaml replaces the launcher of Hydra's joblib plugin by popfair's under the
# same name (so `hydra/launcher=joblib` gets the one whose dead worker fails only its own case); Hydra
# checks the file against the plugin's settings schema of that name, which is what we want, and warns
# that matching by name is deprecated. The file keeps the schema's fields: the warning says nothing useful.
warnings.filterwarnings(
    "ignore", message=r"\s*'hydra/launcher/joblib' is validated against ConfigStore schema", category=UserWarning
)

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # popfair/, this file is popfair/runtime/paths.py


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


def output_dir() -> Path:
    """Hydra's output folder of this case (where a table audit's table_report.csv goes); the working
    folder outside Hydra."""
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        return Path(HydraConfig.get().runtime.output_dir)
    return Path.cwd()
