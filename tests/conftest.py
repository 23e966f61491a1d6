"""Shared fixtures: compose configs with Hydra's compose API, isolated MLflow stores."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

os.environ.setdefault("DATAFRAME_FRAMEWORK", "pandas")

CONF_DIR = str(Path(__file__).resolve().parents[1] / "conf")


def compose_config(overrides: list[str] | None = None, *, tmp_path: Path | None = None) -> DictConfig:
    """The composed config; with tmp_path, MLflow tracks into that directory."""
    extra = []
    if tmp_path is not None:
        extra = [f"tracking.uri=sqlite:///{tmp_path}/mlflow.db", f"tracking.artifact_root={tmp_path}/artifacts"]
    with initialize_config_dir(version_base="1.3", config_dir=CONF_DIR):
        return compose(config_name="config", overrides=list(overrides or []) + extra)


@pytest.fixture
def compose_cfg():
    return compose_config
