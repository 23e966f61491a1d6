"""Image resumes: PNG of the configured size, deterministic bytes, the photo slot filled only by
image_photo (and differently per photo cell), manifest errors, and samples logged to MLflow."""

from __future__ import annotations

import io

import mlflow
import numpy as np
import pytest
from PIL import Image

from popfair.case.compose import build
from popfair.case.population import PopulationCase
from popfair.core.errors import ConfigError, DataError
from popfair.render.image import ImagePhotoRenderer, ImageRenderer
from tests.conftest import PHOTO_CELL_COLOURS, compose_config, synthetic_photos_dir
from tests.test_render_text import JOB, PROFILE, pools

SMALL = {"width": 640, "height": 900, "margin": 32, "font_size": 12, "photo_width": 120}


@pytest.fixture
def photos_dir(tmp_path):
    return synthetic_photos_dir(tmp_path / "photos")


def pixels(png: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(int)


def region(array: np.ndarray, box: tuple[int, int, int, int]) -> np.ndarray:
    left, top, right, bottom = box
    return array[top:bottom, left:right]


def test_image_is_a_png_of_the_configured_size_with_the_resume_text():
    renderer = ImageRenderer(pools=pools(), seed=0, **SMALL)
    doc = renderer.render(PROFILE, JOB)
    assert doc.kind == "image" and doc.image_png[:8] == b"\x89PNG\r\n\x1a\n"
    image = Image.open(io.BytesIO(doc.image_png))
    assert image.format == "PNG" and image.size == (640, 900)
    assert doc.text.startswith("Keisha Washington\n") and doc.profile is PROFILE
    ink = (pixels(doc.image_png) < 128).any(axis=2)
    assert 0.01 < ink.mean() < 0.2  # text drawn, page mostly white
    assert ink[: SMALL["margin"]].sum() == 0 and ink[:, -SMALL["margin"] + 2 :].sum() == 0  # margins kept


def test_image_bytes_are_deterministic_and_change_with_the_profile():
    a = ImageRenderer(pools=pools(), seed=0, **SMALL).render(PROFILE, JOB).image_png
    b = ImageRenderer(pools=pools(), seed=0, **SMALL).render(dict(PROFILE), JOB).image_png
    assert a == b
    c = ImageRenderer(pools=pools(), seed=0, **SMALL).render({**PROFILE, "exp_year": 2}, JOB).image_png
    assert c != a


def test_photo_slot_differs_between_cells_and_is_blank_without_photos(photos_dir):
    plain = ImageRenderer(pools=pools(), seed=0, **SMALL)
    photo = ImagePhotoRenderer(pools=pools(), seed=0, photos_dir=str(photos_dir), **SMALL)
    assert photo.kind == "image_photo" and plain.kind == "image"
    box = photo.slot_box
    female = photo.render(PROFILE, JOB)
    male = photo.render({**PROFILE, "gender": "male", "race": "white"}, JOB)
    without = plain.render(PROFILE, JOB)
    assert female.kind == "image" and Image.open(io.BytesIO(female.image_png)).size == (640, 900)

    f_slot, m_slot = region(pixels(female.image_png), box), region(pixels(male.image_png), box)
    assert (region(pixels(without.image_png), box) == 255).all()  # no photo: the slot is blank
    assert np.abs(f_slot - m_slot).mean() > 50  # a different cell's photo fills the slot
    assert np.allclose(
        f_slot[box[3] - box[1] - 2, box[2] - box[0] - 2], PHOTO_CELL_COLOURS[("female", "black", "30-44")], atol=3
    )
    assert np.allclose(
        m_slot[box[3] - box[1] - 2, box[2] - box[0] - 2], PHOTO_CELL_COLOURS[("male", "white", "30-44")], atol=3
    )
    # outside the slot (and its 1px frame) the two formats are pixel-identical
    outside = pixels(without.image_png)
    with_photo = pixels(female.image_png)
    left, top, right, bottom = box
    with_photo[top - 1 : bottom + 1, left - 1 : right + 1] = outside[top - 1 : bottom + 1, left - 1 : right + 1]
    assert (with_photo == outside).all()
    # age band decides the cell too
    younger = photo.render({**PROFILE, "age": 25, "birth_year": 1999}, JOB)
    assert np.allclose(
        region(pixels(younger.image_png), box)[5, 5], PHOTO_CELL_COLOURS[("female", "black", "18-29")], atol=3
    )


def test_missing_photo_cell_is_reported_before_rendering(photos_dir):
    import pandas as pd

    photo = ImagePhotoRenderer(pools=pools(), seed=0, photos_dir=str(photos_dir), **SMALL)
    table = pd.DataFrame([PROFILE, {**PROFILE, "applicant_id": "x", "race": "api", "gender": "male"}])
    with pytest.raises(DataError, match=r"no photo for .*\('male', 'api', '30-44'\)"):
        photo.check_profiles(table)
    with pytest.raises(DataError, match=r"no photo for .*\('male', 'api', '30-44'\)"):
        photo.render(table.iloc[1].to_dict(), JOB)
    with pytest.raises(DataError, match="age 50 falls in no renderer.age_bands"):
        photo.render({**PROFILE, "age": 50}, JOB)


def test_photos_dir_errors_name_the_problem(tmp_path, photos_dir):
    kwargs = dict(pools=pools(), seed=0, **SMALL)
    with pytest.raises(ConfigError, match="renderer.photos_dir: renderer=image_photo needs"):
        ImagePhotoRenderer(**kwargs)
    with pytest.raises(ConfigError, match="is not a directory"):
        ImagePhotoRenderer(photos_dir=str(tmp_path / "nowhere"), **kwargs)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataError, match="manifest.csv: photo manifest missing"):
        ImagePhotoRenderer(photos_dir=str(empty), **kwargs)
    (empty / "manifest.csv").write_text("gender,race,file\nfemale,black,a.png\n")
    with pytest.raises(DataError, match=r"missing columns \['age_band'\]"):
        ImagePhotoRenderer(photos_dir=str(empty), **kwargs)
    (empty / "manifest.csv").write_text("gender,race,age_band,file\nwoman,black,18-29,a.png\n")
    with pytest.raises(DataError, match=r"column gender has \['woman'\]"):
        ImagePhotoRenderer(photos_dir=str(empty), **kwargs)
    (empty / "manifest.csv").write_text("gender,race,age_band,file\nfemale,black,18-29,a.png\n")
    with pytest.raises(DataError, match="photo file 'a.png' not found"):
        ImagePhotoRenderer(photos_dir=str(empty), **kwargs)
    with pytest.raises(ConfigError, match="renderer.age_bands: bands 18-29 and 25-44 overlap"):
        ImagePhotoRenderer(photos_dir=str(photos_dir), age_bands={"18-29": [18, 29], "25-44": [25, 44]}, **kwargs)


@pytest.mark.parametrize(
    "override, key",
    [
        ("renderer.width=100", "renderer.width"),
        ("renderer.font_path=/no/such.ttf", "renderer.font_path"),
        ("renderer.font_size=3", "renderer.font_size"),
    ],
)
def test_bad_image_options_fail_at_composition(override, key):
    with pytest.raises(ConfigError, match=key):
        build(compose_config(["renderer=image", override]).renderer, "renderer")


def test_image_photo_config_composes_and_requires_photos_dir(photos_dir):
    with pytest.raises(ConfigError, match="renderer.photos_dir"):
        build(compose_config(["renderer=image_photo"]).renderer, "renderer")
    renderer = build(compose_config(["renderer=image_photo", f"renderer.photos_dir={photos_dir}"]).renderer, "renderer")
    assert isinstance(renderer, ImagePhotoRenderer) and renderer.width == 850 and renderer.height == 1100


def test_image_run_logs_sample_text_and_png_artifacts(tmp_path):
    cfg = compose_config(
        ["renderer=image", "population.n=60", "estimator=outcome_gap", "estimator.n_bootstrap=100"], tmp_path=tmp_path
    )
    experiment = PopulationCase.from_config(cfg)
    result = experiment.run()
    assert experiment.case_name().split("-")[2] == "image"
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
    names = {a.path for a in mlflow.MlflowClient().list_artifacts(result.run_id, "samples")}
    assert len(names) == 6 and sum(n.endswith(".png") for n in names) == 3
    png = next(n for n in sorted(names) if n.endswith(".png"))
    local = mlflow.artifacts.download_artifacts(run_id=result.run_id, artifact_path=png, dst_path=str(tmp_path / "dl"))
    assert Image.open(local).size == (850, 1100)
