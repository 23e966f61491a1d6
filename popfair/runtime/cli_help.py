"""`popfair --help` without composing a config.

Hydra builds its help by listing every config group, and for each listing it deep-copies its
config repository (about 100 copies here, 2 s). The help needs none of that: the group names
are the folders of the config directory and the options are their YAML files. This module
fills the same template (`conf/hydra/help/popfair.yaml`) from the directory listing; a test
checks the text is identical to Hydra's own help."""

from __future__ import annotations

import string
from pathlib import Path

import yaml


def config_groups(conf_dir: Path) -> dict[str, list[str]]:
    """Group path -> sorted option names, for every folder under `conf_dir` holding YAML files,
    except Hydra's own groups (hydra/...), as Hydra's $APP_CONFIG_GROUPS lists them."""
    groups: dict[str, list[str]] = {}
    for folder in sorted(p for p in conf_dir.rglob("*") if p.is_dir()):
        name = folder.relative_to(conf_dir).as_posix()
        if name == "hydra" or name.startswith("hydra/"):
            continue
        options = sorted(p.stem for p in folder.glob("*.yaml"))
        if options:
            groups[name] = options
    return groups


def render_help(conf_dir: Path) -> str | None:
    """The help text Hydra would print for `conf_dir` (header, group listing, footer); None when
    the template asks for something only Hydra can fill ($CONFIG, $FLAGS_HELP, other keys)."""
    help_cfg = yaml.safe_load((conf_dir / "hydra" / "help" / "popfair.yaml").read_text())
    groups = "".join(f"{name}: {', '.join(options)}\n" for name, options in sorted(config_groups(conf_dir).items()))
    text = help_cfg["template"]
    for key in ("header", "footer", "app_name"):  # the ${hydra.help.<key>} interpolations of the template
        text = text.replace(f"${{hydra.help.{key}}}", help_cfg.get(key, ""))
    if "${" in text:
        return None
    try:
        return string.Template(text).substitute(APP_CONFIG_GROUPS=groups)
    except (KeyError, ValueError):
        return None
