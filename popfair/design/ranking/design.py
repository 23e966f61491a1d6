"""The ranking design: one prompt per trial holding its k resumes (labelled "Candidate 1..k" in the
order shown), the question "rank them" (conf/prompts/rank_*.txt), replies read into ranks with
the trial's candidate names (popfair.design.ranking.parse), and the ranking estimator.

The screen stage keeps each reply as text (`parse_reply` checks only that there is one): a
ranking can only be read knowing the trial's names, which the design has and the screener not.
A reply is therefore re-read on every run from the cached text, and a better parser needs no new
calls."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import chain
from typing import Any

import numpy as np
import pandas as pd

from popfair.core.errors import ConfigError
from popfair.core.types import Document, Outcome, Profiles, ScreenResult
from popfair.design.base import DesignBase, PowerLine, check_estimator
from popfair.design.ranking import planning
from popfair.design.ranking.parse import parse_ranking
from popfair.design.ranking.trials import GROUP, TRIAL, RankingTrials
from popfair.design.sequential import SequentialRules
from popfair.estimate.ranking.estimator import RankingEstimator

TEXT_KINDS = ("text",)  # PopResume profiles render as text resumes (the JSON renderer is the paired design's)
CANDIDATE_HEADER = "=== Candidate "  # heads each resume in a trial's prompt
TOKENS_PER_NAME = 8  # "3. Maria Garcia-Lopez" and a newline, in common tokenisers
RANK = "rank"  # column: 1 = ranked first; NaN = not ranked (failed trial, or left out of a partial ranking)


class RankingDesign(DesignBase):
    name = "ranking"
    outcome: Outcome = "rank"
    power_line: PowerLine | None = staticmethod(planning.ranking_power)
    power_imports: tuple[str, ...] = planning.POWER_IMPORTS
    sequential: SequentialRules | None = planning.RankingLooks()
    prompt_files: Mapping[str, str] = {"system": "rank_system.txt", "user": "rank_user.txt"}

    def parse_reply(self, raw: str) -> tuple[float | None, str | None]:
        """The screen stage's check: a reply is there (its ranking is read in `scored`)."""
        return (None, None) if raw.strip() else (None, "no ranking: empty reply")

    def reply_tokens(self, users: Sequence[str]) -> np.ndarray:
        """A numbered list of the k names: about TOKENS_PER_NAME tokens per candidate."""
        return np.array([TOKENS_PER_NAME * user.count(CANDIDATE_HEADER) for user in users], dtype=np.int64)

    def check_case(self, parts: Mapping[str, Any]) -> None:
        renderer, screener = parts["renderer"], parts["screener"]
        if renderer.kind not in TEXT_KINDS:
            raise ConfigError(
                f"renderer: the ranking design puts k text resumes in one prompt; use renderer=text, got "
                f"renderer={renderer.kind}"
            )
        if not screener.answers_rankings:
            raise ConfigError(
                f"screener: {screener.name} cannot rank candidates; use a chat model "
                "(screener=gpt4o_mini, ...) or the offline twin screener=simulated_ranker"
            )
        check_estimator(self, parts["estimator"])
        population, estimator = parts["population"], parts["estimator"]
        groups = population.groups if isinstance(population, RankingTrials) else None
        reference = estimator.reference if isinstance(estimator, RankingEstimator) else None
        if groups is not None and reference is not None and reference not in groups:
            raise ConfigError(
                f"estimator.reference: {reference!r} is not one of the trials' groups ({', '.join(groups)}); "
                "set estimator.reference to one of them"
            )

    def prompts(self, profiles: Profiles, rows: pd.DataFrame, documents: Sequence[Document]) -> list[Document]:
        """One document per trial: its candidates' resumes in the order shown, each headed by its label."""
        trials = rows[TRIAL].to_numpy()
        starts = np.flatnonzero(np.r_[True, trials[1:] != trials[:-1]])
        bounds = np.r_[starts, len(rows)]
        names = (rows["first_name"].astype(str) + " " + rows["surname"].astype(str)).to_numpy()
        groups = rows[GROUP].to_numpy()
        job_ids = rows["job_id"].to_numpy()
        out = []
        for a, b in zip(bounds[:-1], bounds[1:]):
            block = "\n\n".join(
                f"=== Candidate {i + 1} ===\n{documents[r].text.strip()}" for i, r in enumerate(range(a, b))
            )
            out.append(
                Document(
                    applicant_id=str(trials[a]),
                    job_id=str(job_ids[a]),
                    kind="text",
                    text=block,
                    profile={"names": list(names[a:b]), "groups": list(groups[a:b])},
                )
            )
        return out

    def scored(
        self,
        profiles: Profiles,
        rows: pd.DataFrame,
        documents: Sequence[Document],
        prompts: Sequence[Document],
        results: Sequence[ScreenResult],
    ) -> pd.DataFrame:
        """One row per candidate: the trial's reply (raw), its rank, y = 1 for the trial's winner, the
        trial's error (screening failure, or a reply that ranks nobody), the parse rule used and how
        many candidates the trial ranked."""
        sizes = np.array([len(p.profile["names"]) if p.profile else 0 for p in prompts], dtype=np.int64)
        raws: list[str | None] = []
        errors: list[str | None] = []
        methods: list[str] = []
        orders: list[tuple[int, ...]] = []
        for prompt, result in zip(prompts, results):
            if result.error is not None:
                raws.append(result.raw)
                errors.append(result.error)
                methods.append("none")
                orders.append(())
                continue
            ranking = parse_ranking(result.raw, prompt.profile["names"] if prompt.profile else [])
            raws.append(result.raw)
            errors.append(ranking.error)
            methods.append(ranking.method)
            orders.append(ranking.order)
        # back onto the candidate rows, vectorised: trial values repeated, ranks scattered
        lengths = np.fromiter(map(len, orders), dtype=np.int64, count=len(orders))
        candidates = np.fromiter(chain.from_iterable(orders), dtype=np.int64, count=int(lengths.sum()))
        starts = np.cumsum(sizes) - sizes
        first_of_trial = np.repeat(np.cumsum(lengths) - lengths, lengths)
        rank = np.full(int(sizes.sum()), np.nan)
        rank[np.repeat(starts, lengths) + candidates] = np.arange(len(candidates)) - first_of_trial + 1
        raw = np.repeat(np.array(raws, dtype=object), sizes)
        error = np.repeat(np.array(errors, dtype=object), sizes)
        method = np.repeat(np.array(methods, dtype=object), sizes)
        n_ranked = np.repeat(lengths, sizes)
        failed = pd.notna(error)
        y = np.where(failed, np.nan, (rank == 1).astype(float))
        return rows.assign(
            document=[d.text for d in documents],
            raw=raw,
            rank=rank,
            y=y,
            error=error,
            parse_method=method,
            n_ranked=n_ranked,
        )


DESIGN = RankingDesign()
