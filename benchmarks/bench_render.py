"""Renderer throughput: 60,000 text resumes (target <= 3 s on this 2-core machine) and PNG pages
per second (target >= 150/s on 2 cores), each measured in one process and with render_all's forked
workers (all CPUs), side by side. Wall and CPU time are both printed: on a shared machine wall time
includes waiting for a core, CPU time does not (for the forked run: this process plus its
workers). Profiles are real PopResume draws, 12,000 per occupation.

    python benchmarks/bench_render.py [--n-text 60000] [--n-png 300]
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hydra import compose, initialize_config_dir  # noqa: E402

from popfair.case.compose import build  # noqa: E402
from popfair.render.base import render_all  # noqa: E402

OCCUPATIONS = ("nurse", "teacher", "software_developer", "accountant", "construction_laborer")


def synthetic_photos(folder: Path) -> Path:
    """One flat-colour 'photo' per (gender, race, age band) cell: enough to time image_photo."""
    from PIL import Image  # noqa: PLC0415

    from popfair.render.photos import GENDERS, RACES  # noqa: PLC0415

    rows = ["gender,race,age_band,file"]
    for i, (gender, race, band) in enumerate((g, r, b) for g in GENDERS for r in RACES for b in ("18-29", "30-44")):
        Image.new("RGB", (300, 360), (40 + 9 * i, 90, 200 - 7 * i)).save(folder / f"p{i}.jpg")
        rows.append(f"{gender},{race},{band},p{i}.jpg")
    (folder / "manifest.csv").write_text("\n".join(rows) + "\n")
    return folder


def case(occupation: str, renderer: str, n: int, *extra: str):
    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
        cfg = compose(
            config_name="config",
            overrides=[f"occupation={occupation}", f"renderer={renderer}", f"population.n={n}", *extra],
        )
    occ = build(cfg.occupation, "occupation")
    profiles = build(cfg.population, "population").sample(occ, build(cfg.protected_attr, "protected_attr"), 0)
    return build(cfg.renderer, "renderer"), profiles


def timed(renderer, profiles, processes: int | None):
    """(documents, wall seconds, CPU seconds of this process and its finished children)."""

    def cpu() -> float:
        own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime

    start, cpu0 = time.perf_counter(), cpu()
    docs = render_all(renderer, profiles.table, profiles.jobs, progress=False, processes=processes)
    return docs, time.perf_counter() - start, cpu() - cpu0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n-text", type=int, default=60_000)
    parser.add_argument("--n-png", type=int, default=300)
    args = parser.parse_args()
    print(f"cpu cores visible: {os.cpu_count()}; load average: {os.getloadavg()[0]:.2f} (machine shared)")

    per = args.n_text // len(OCCUPATIONS)
    cases = [case(occupation, "text", per) for occupation in OCCUPATIONS]
    for label, processes in (("one process", 1), ("forked workers", None)):
        total = wall = cpu = 0.0
        for renderer, profiles in cases:
            docs, w, c = timed(renderer, profiles, processes)
            total, wall, cpu = total + len(docs), wall + w, cpu + c
        print(
            f"text, {label:>14}: {total:,.0f} resumes in {wall:.2f} s wall, {cpu:.2f} s CPU "
            f"({total / cpu:,.0f}/s per CPU second)  target <= 3 s wall: {'PASS' if wall <= 3 else 'FAIL'}"
        )

    photos = synthetic_photos(Path(tempfile.mkdtemp(prefix="popfair-photos-")))
    for kind, extra in (("image", ()), ("image_photo", (f"renderer.photos_dir={photos}",))):
        renderer, profiles = case("software_developer", kind, args.n_png, *extra)
        render_all(renderer, profiles.table.head(20), profiles.jobs, progress=False)  # warm caches
        for label, processes in (("one process", 1), ("forked workers", None)):
            docs, wall, cpu = timed(renderer, profiles, processes)
            size = sum(len(d.image_png) for d in docs) / len(docs) / 1024
            rate = len(docs) / wall
            verdict = f"  target >= 150/s: {'PASS' if rate >= 150 else 'FAIL'}" if kind == "image" else ""
            print(
                f"{kind}, {label:>14}: {len(docs)} PNGs ({renderer.width}x{renderer.height}) in {wall:.2f} s wall "
                f"= {rate:.0f}/s, {cpu:.2f} s CPU = {len(docs) / cpu:.0f}/s per CPU second, {size:.0f} KiB each"
                f"{verdict}"
            )
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
