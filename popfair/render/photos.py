"""Headshot photos for `renderer=image_photo`, indexed by (gender, race, age band) via a manifest.

The paper generated photos with a face model that cannot run here, so photos are supplied by the
user in `renderer.photos_dir`, which must hold `manifest.csv` with columns

    gender    female | male
    race      black | white | hispanic | api | other
    age_band  a label of `renderer.age_bands` (e.g. 18-29)
    file      image path relative to photos_dir (any format Pillow opens)

One or more photos per cell; an applicant gets one photo of their cell, chosen by a hash of
(seed, applicant_id) so the choice is stable. Cells the population never needs may be absent.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from PIL import Image, UnidentifiedImageError

from popfair.core.errors import ConfigError, DataError, require

GENDERS = ("female", "male")
RACES = ("black", "white", "hispanic", "api", "other")
MANIFEST_NAME = "manifest.csv"
MANIFEST_COLUMNS = ("gender", "race", "age_band", "file")

Cell = tuple[str, str, str]


def parse_age_bands(bands: Any) -> list[tuple[str, int, int]]:
    """`age_bands` config: a mapping label -> [min_age, max_age] (inclusive), non-overlapping."""
    require(
        isinstance(bands, Mapping) and len(bands) > 0,
        "renderer.age_bands",
        f"must be a mapping such as {{'18-29': [18, 29], '30-44': [30, 44]}}, got {bands!r}",
    )
    parsed = []
    for label, span in bands.items():
        require(
            isinstance(span, (list, tuple))
            and len(span) == 2
            and all(isinstance(v, int) for v in span)
            and span[0] <= span[1],
            f"renderer.age_bands.{label}",
            f"must be [min_age, max_age] integers, got {span!r}",
        )
        parsed.append((str(label), int(span[0]), int(span[1])))
    parsed.sort(key=lambda band: band[1])
    for (a, _, a_hi), (b, b_lo, _) in zip(parsed, parsed[1:]):
        require(b_lo > a_hi, "renderer.age_bands", f"bands {a} and {b} overlap")
    return parsed


class PhotoLibrary:
    """The manifest of `photos_dir`, validated on construction; photos decoded once and cached."""

    def __init__(
        self, photos_dir: str | None, age_bands: Mapping[str, Sequence[int]], seed: int, size: tuple[int, int]
    ) -> None:
        if not photos_dir:
            raise ConfigError(
                "renderer.photos_dir: renderer=image_photo needs a folder of headshots "
                f"with {MANIFEST_NAME} (columns {', '.join(MANIFEST_COLUMNS)}); "
                "set renderer.photos_dir=/path/to/photos"
            )
        self.dir = Path(photos_dir).expanduser()
        if not self.dir.is_dir():
            raise ConfigError(f"renderer.photos_dir: {self.dir} is not a directory")
        self.bands = parse_age_bands(age_bands)
        self.seed, self.size = seed, size
        manifest = self.dir / MANIFEST_NAME
        if not manifest.is_file():
            raise DataError(f"{manifest}: photo manifest missing; it needs columns {', '.join(MANIFEST_COLUMNS)}")
        table = pd.read_csv(manifest, dtype=str)
        missing = [c for c in MANIFEST_COLUMNS if c not in table.columns]
        if missing:
            raise DataError(f"{manifest}: missing columns {missing} (needs {list(MANIFEST_COLUMNS)})")
        labels = [label for label, _, _ in self.bands]
        allowed = {"gender": GENDERS, "race": RACES, "age_band": labels}
        for column, values in allowed.items():
            bad = sorted(set(table[column].fillna("<empty>")) - set(values))
            if bad:
                raise DataError(f"{manifest}: column {column} has {bad}; allowed {list(values)}")
        self.cells: dict[Cell, list[Path]] = {}
        for row in table.itertuples(index=False):
            path = self.dir / str(row.file)
            if not path.is_file():
                raise DataError(f"{manifest}: photo file {row.file!r} not found in {self.dir}")
            self.cells.setdefault((row.gender, row.race, row.age_band), []).append(path)
        if not self.cells:
            raise DataError(f"{manifest}: no photos listed")
        self._cache: dict[Path, Image.Image] = {}

    def digest(self) -> str:
        """sha256 over the manifest and every photo's bytes (the document store's key)."""
        digest = hashlib.sha256((self.dir / MANIFEST_NAME).read_bytes())
        for paths in self.cells.values():
            for path in paths:
                digest.update(hashlib.sha256(path.read_bytes()).digest())
        return digest.hexdigest()

    def age_band(self, age: int) -> str:
        for label, low, high in self.bands:
            if low <= age <= high:
                return label
        raise DataError(f"age {age} falls in no renderer.age_bands band {[b[0] for b in self.bands]}")

    def cell(self, profile: Mapping[str, Any]) -> Cell:
        return (str(profile["gender"]), str(profile["race"]), self.age_band(int(profile["age"])))

    def check(self, cells: set[Cell]) -> None:
        """Raise a DataError naming every needed cell the manifest lacks."""
        absent = sorted(cells - set(self.cells))
        if absent:
            raise DataError(
                f"{self.dir / MANIFEST_NAME}: no photo for (gender, race, age_band) cells "
                f"{absent}; cells present: {sorted(self.cells)}"
            )

    def photo(self, profile: Mapping[str, Any]) -> Image.Image:
        """The applicant's headshot, centre-cropped and resized to the slot (RGB)."""
        cell = self.cell(profile)
        self.check({cell})
        options = self.cells[cell]
        digest = hashlib.blake2b(f"{self.seed}\x1f{profile['applicant_id']}\x1fphoto".encode(), digest_size=8).digest()
        path = options[int.from_bytes(digest, "little") % len(options)]
        if path not in self._cache:
            self._cache[path] = self._load(path)
        return self._cache[path]

    def _load(self, path: Path) -> Image.Image:
        try:
            with Image.open(path) as image:
                image = image.convert("RGB")
        except (UnidentifiedImageError, OSError) as exc:
            raise DataError(f"{path}: not a readable image ({exc})") from None
        width, height = self.size
        scale = max(width / image.width, height / image.height)  # cover the slot, then crop centre
        resized = image.resize(
            (max(width, round(image.width * scale)), max(height, round(image.height * scale))), Image.Resampling.LANCZOS
        )
        left, top = (resized.width - width) // 2, (resized.height - height) // 2
        return resized.crop((left, top, left + width, top + height))
