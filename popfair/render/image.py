"""Image resumes (renderers `image` and `image_photo`): the text resume's content laid out on a
page and rasterised to PNG with Pillow, for VLM screeners.

Both share one layout: a header (name, location, phone, email) on the left, a headshot slot at the
top right, then skills (two columns), work history and education. `image` leaves the slot blank,
`image_photo` fills it with a photo of the applicant's (gender, race, age band) cell, so the two
formats differ only inside the slot. Documents keep the resume text for logging and cache keys.
"""

from __future__ import annotations

import io
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import pandas as pd
import PIL
import PIL.features
from PIL import Image, ImageDraw, ImageFont

from popfair.core.errors import ConfigError, DataError, require
from popfair.core.types import Document, Job
from popfair.render.content import ResumePools
from popfair.render.photos import PhotoLibrary
from popfair.render.store import file_digest
from popfair.render.text import LAYOUT_CONSTRAINTS, RESUME_FIELDS, Resume, ResumeBuilder, validate_layout_options

MIN_FONT_SIZE = 9
PNG_COMPRESS_LEVEL = 1  # fastest zlib level; pages are mostly white, so files stay small
INK, MUTED, RULE, SLOT_BORDER = 20, 70, 150, 120  # grey levels (0 black, 255 white)
DEFAULT_AGE_BANDS = {"18-29": [18, 29], "30-44": [30, 44]}


def _matplotlib_font(name: str) -> Path | None:
    try:
        import matplotlib
    except ImportError:
        return None
    path = Path(matplotlib.get_data_path()) / "fonts" / "ttf" / name
    return path if path.is_file() else None


def _fontconfig_font(pattern: str) -> Path | None:
    if shutil.which("fc-match") is None:
        return None
    try:
        out = subprocess.run(
            ["fc-match", "-f", "%{file}", pattern], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return Path(out) if out.lower().endswith((".ttf", ".otf")) and Path(out).is_file() else None


def locate_font(path: str | None, bold: bool) -> Path:
    """A TrueType font: `path` if given, else DejaVu Sans shipped with matplotlib, else fontconfig."""
    key = "renderer.bold_font_path" if bold else "renderer.font_path"
    if path:
        given = Path(path).expanduser()
        require(given.is_file(), key, f"font file {given} does not exist")
        return given
    found = (
        _matplotlib_font("DejaVuSans-Bold.ttf" if bold else "DejaVuSans.ttf")
        or _fontconfig_font("DejaVu Sans:bold" if bold else "DejaVu Sans")
        or _fontconfig_font("sans-serif:bold" if bold else "sans-serif")
    )
    if found is None:
        raise ConfigError(
            f"{key}: no TrueType font found (looked for DejaVu Sans in matplotlib's "
            "mpl-data and via fc-match); set it to a .ttf file"
        )
    return found


@lru_cache(maxsize=64)
def _font(path: str, size: int) -> ImageFont.FreeTypeFont:
    try:
        return ImageFont.truetype(path, size)
    except OSError as exc:
        raise ConfigError(f"renderer.font_path: cannot load font {path}: {exc}") from None


MAX_CACHED_LINES = 50_000  # rendered-line masks kept per layout size (pool text repeats a lot)


class _Fonts:
    """The four faces of one layout size, with caches of word widths (for wrapping) and of rendered
    line masks (pool lines recur across resumes, so most lines are rasterised once)."""

    def __init__(self, regular: Path, bold: Path, size: int) -> None:
        self.size = size
        self.body = _font(str(regular), size)
        self.bold = _font(str(bold), size)
        self.heading = _font(str(bold), round(size * 1.15))
        self.name = _font(str(bold), round(size * 1.9))
        self.line = round(size * 1.4)
        self._widths: dict[tuple[int, str], float] = {}
        self._masks: dict[tuple[int, str], tuple[Image.Image, tuple[int, int]]] = {}

    def mask(self, font: ImageFont.FreeTypeFont, text: str) -> tuple[Image.Image, tuple[int, int]]:
        """The text's coverage mask ("L") and its offset from the drawing origin."""
        key = (id(font), text)
        found = self._masks.get(key)
        if found is None:
            left, top, right, bottom = (int(v) for v in font.getbbox(text))  # FreeType boxes are whole pixels
            mask = Image.new("L", (max(1, right - left), max(1, bottom - top)), 0)
            ImageDraw.Draw(mask).text((-left, -top), text, font=font, fill=255)
            found = (mask, (left, top))
            if len(self._masks) >= MAX_CACHED_LINES:
                self._masks.clear()
            self._masks[key] = found
        return found

    def width(self, font: ImageFont.FreeTypeFont, text: str) -> float:
        key = (id(font), text)
        if key not in self._widths:
            self._widths[key] = font.getlength(text)
        return self._widths[key]

    def wrap(self, text: str, font: ImageFont.FreeTypeFont, width: float) -> list[str]:
        """Greedy word wrap to `width` pixels (word widths are cached; no kerning in basic layout)."""
        space = self.width(font, " ")
        lines: list[str] = []
        current: list[str] = []
        used = 0.0
        for word in text.split():
            w = self.width(font, word)
            if current and used + space + w > width:
                lines.append(" ".join(current))
                current, used = [word], w
            else:
                used += (space if current else 0.0) + w
                current.append(word)
        if current:
            lines.append(" ".join(current))
        return lines


@lru_cache(maxsize=16)
def _fonts(regular: Path, bold: Path, size: int) -> _Fonts:
    return _Fonts(regular, bold, size)


@dataclass(frozen=True)
class _Op:
    x: float
    y: float
    text: str
    font: ImageFont.FreeTypeFont
    fill: int


class ImageRenderer:
    """PNG resume without a photo (kind "image")."""

    kind = "image"
    shows: frozenset[str] | None = frozenset()  # the text resume's content as a page: no demographic field, no photo
    parameter_constraints = LAYOUT_CONSTRAINTS  # page geometry is checked in __init__ (width vs margin)
    with_photo = False
    rows_per_process = 32  # render_all forks workers for 64 pages or more (about 0.3 s of work each)
    store_fields = RESUME_FIELDS  # what a page depends on besides the settings (render/store.py)

    def __init__(
        self,
        pools: Mapping[str, Any] | None = None,
        seed: int = 0,
        n_skills: int = 8,
        bullets_per_role: int = 3,
        email_domain: str = "example.com",
        width: int = 850,
        height: int = 1100,
        margin: int = 48,
        font_size: int = 15,
        font_path: str | None = None,
        bold_font_path: str | None = None,
        photo_width: int = 150,
        photos_dir: str | None = None,
        age_bands: Mapping[str, Any] | None = None,
        require_photos: bool = True,
    ) -> None:
        validate_layout_options(n_skills, bullets_per_role, email_domain, seed)
        for key, value, low, high in (
            ("width", width, 300, 4000),
            ("height", height, 300, 6000),
            ("margin", margin, 0, 400),
            ("font_size", font_size, MIN_FONT_SIZE, 60),
            ("photo_width", photo_width, 40, 1000),
        ):
            require(
                isinstance(value, int) and low <= value <= high,
                f"renderer.{key}",
                f"must be an integer in {low}..{high}, got {value!r}",
            )
        self.slot = (photo_width, round(photo_width * 1.2))
        require(
            width - 2 * margin - self.slot[0] >= 200,
            "renderer.width",
            f"page {width}px leaves under 200px beside the photo slot; raise width or lower margin/photo_width",
        )
        self.width, self.height, self.margin, self.font_size = width, height, margin, font_size
        self.regular, self.bold = locate_font(font_path, bold=False), locate_font(bold_font_path, bold=True)
        self.builder = ResumeBuilder(
            ResumePools.from_config(pools, n_skills=n_skills, bullets_per_role=bullets_per_role),
            seed=seed,
            n_skills=n_skills,
            bullets_per_role=bullets_per_role,
            email_domain=email_domain,
        )
        # require_photos=False (dry runs): without photos_dir the page is laid out with an empty slot,
        # the same size as with a photo, which is all a cost plan needs
        self.photos = (
            PhotoLibrary(photos_dir, age_bands if age_bands is not None else DEFAULT_AGE_BANDS, seed, self.slot)
            if self.with_photo and (require_photos or photos_dir)
            else None
        )

    @property
    def slot_box(self) -> tuple[int, int, int, int]:
        """(left, top, right, bottom) of the headshot slot, in pixels."""
        left = self.width - self.margin - self.slot[0]
        return (left, self.margin, left + self.slot[0], self.margin + self.slot[1])

    def store_identity(self) -> dict[str, Any]:
        """What shapes the page beyond the settings: the rasteriser and encoder versions, the font
        files (a null font_path finds whatever DejaVu this machine has) and the photos."""
        return {
            "pillow": PIL.__version__,
            "zlib": PIL.features.version("zlib"),
            "fonts": [file_digest(self.regular), file_digest(self.bold)],
            "photos": None if self.photos is None else self.photos.digest(),
        }

    def check_profiles(self, table: pd.DataFrame) -> None:
        """Before rendering anything: every (gender, race, age band) cell needed has a photo."""
        if self.photos is None:
            return
        bands = table["age"].map(self.photos.age_band)
        self.photos.check(set(zip(table["gender"].astype(str), table["race"].astype(str), bands)))

    def render(self, profile: Mapping[str, Any], job: Job) -> Document:
        resume = self.builder.build(profile)
        photo = self.photos.photo(profile) if self.photos is not None else None
        return Document(
            applicant_id=str(profile["applicant_id"]),
            job_id=job.job_id,
            kind="image",
            text=resume.to_text(),
            image_png=self.draw(resume, photo),
            profile=profile,
        )

    def fit(self, resume: Resume) -> tuple[_Fonts, list[_Op], list[tuple[float, float, float]]]:
        """The page layout (fonts, text runs, rules), shrinking the font a point at a time until the
        resume fits the page. Shared by the PNG and the PDF renderers."""
        for size in range(self.font_size, MIN_FONT_SIZE - 1, -1):
            fonts = _fonts(self.regular, self.bold, size)
            ops, rules, bottom = self._layout(resume, fonts)
            if bottom <= self.height - self.margin:
                return fonts, ops, rules
        raise DataError(
            f"resume of {resume.name!r} does not fit a {self.width}x{self.height} page even "
            f"at {MIN_FONT_SIZE}px; raise renderer.height or lower renderer.bullets_per_role"
        )

    def draw(self, resume: Resume, photo: Image.Image | None = None) -> bytes:
        """Lay out and rasterise."""
        fonts, ops, rules = self.fit(resume)
        page = Image.new("RGB" if photo is not None else "L", (self.width, self.height), "white")
        pen = ImageDraw.Draw(page)
        fill = (lambda g: (g, g, g)) if photo is not None else (lambda g: g)
        for op in ops:
            mask, (dx, dy) = fonts.mask(op.font, op.text)
            x, y = round(op.x) + dx, round(op.y) + dy
            page.paste(fill(op.fill), (x, y, x + mask.width, y + mask.height), mask)
        for x0, rule_y, x1 in rules:
            pen.line([(x0, rule_y), (x1, rule_y)], fill=fill(RULE), width=1)
        if photo is not None:
            left, top, right, bottom = self.slot_box
            page.paste(photo, (left, top))
            pen.rectangle([left - 1, top - 1, right, bottom], outline=fill(SLOT_BORDER), width=1)
        buffer = io.BytesIO()
        page.save(buffer, format="PNG", compress_level=PNG_COMPRESS_LEVEL)
        return buffer.getvalue()

    def _layout(self, resume: Resume, f: _Fonts) -> tuple[list[_Op], list[tuple[float, float, float]], float]:
        ops: list[_Op] = []
        rules: list[tuple[float, float, float]] = []
        left, right = self.margin, self.width - self.margin
        header_right = self.slot_box[0] - 16

        y = float(self.margin)
        ops.append(_Op(left, y, resume.name, f.name, INK))
        y += f.name.size * 1.35
        for line in (resume.location, resume.phone, resume.email):
            for part in f.wrap(line, f.body, header_right - left):
                ops.append(_Op(left, y, part, f.body, MUTED))
                y += f.line
        y = max(y, self.slot_box[3]) + f.line

        def heading(title: str) -> None:
            nonlocal y
            ops.append(_Op(left, y, title, f.heading, INK))
            y += f.heading.size * 1.3
            rules.append((left, y, right))
            y += f.line * 0.5

        def bullet(text: str, x: float, width: float) -> None:
            nonlocal y
            indent = f.width(f.body, "\u2022 ")
            for i, part in enumerate(f.wrap(text, f.body, width - indent)):
                if i == 0:
                    ops.append(_Op(x, y, "\u2022", f.body, INK))
                ops.append(_Op(x + indent, y, part, f.body, INK))
                y += f.line

        if resume.skills:  # n_skills = 0: no skills section
            heading("SKILLS")
            column = (right - left) / 2
            half = (len(resume.skills) + 1) // 2
            top = y
            for col, skills in enumerate((resume.skills[:half], resume.skills[half:])):
                y = top
                for skill in skills:
                    bullet(skill, left + col * column, column - 12)
                if col == 0:
                    first_bottom = y
            y = max(first_bottom, y) + f.line * 0.5

        heading("WORK HISTORY")
        for i, role in enumerate(resume.roles):
            if i:
                y += f.line * 0.4
            period_w = f.width(f.bold, role.period)
            ops.append(_Op(right - period_w, y, role.period, f.bold, INK))
            for part in f.wrap(role.title, f.bold, right - left - period_w - 16):
                ops.append(_Op(left, y, part, f.bold, INK))
                y += f.line
            for part in f.wrap(f"{role.employer} | {resume.location}", f.body, right - left):
                ops.append(_Op(left, y, part, f.body, MUTED))
                y += f.line
            for text in role.bullets:
                bullet(text, left + 8, right - left - 8)
        y += f.line * 0.5

        heading("EDUCATION")
        for entry in resume.education:
            year = str(entry.year)
            year_w = f.width(f.bold, year)
            ops.append(_Op(right - year_w, y, year, f.bold, INK))
            for part in f.wrap(entry.credential, f.bold, right - left - year_w - 16):
                ops.append(_Op(left, y, part, f.bold, INK))
                y += f.line
            ops.append(_Op(left, y, entry.school, f.body, MUTED))
            y += f.line * 1.2
        return ops, rules, y


class ImagePhotoRenderer(ImageRenderer):
    """PNG resume with a headshot from `photos_dir` (renderer name "image_photo", document kind
    "image"). Needs photos_dir with a manifest (schema in popfair/render/photos.py)."""

    kind = "image_photo"
    shows: frozenset[str] | None = frozenset(
        {"gender", "race"}
    )  # the headshot shows both (chosen by the applicant's gender and race)
    with_photo = True
    store_fields = (*RESUME_FIELDS, "gender", "race")  # and the photo's cell
