"""A case's placebo edits (config `renderer.placebo`, popfair.render.placebo): which applicants are
screened again with an edited document, the prompts that shows the screener (priced by the plan,
screened in the same pass as the case's own prompts, so through the same cache: each asked once),
and the rows `placebo.<edit>` added beside the demographic effects.

One-document designs (population, paired) edit the sampled applicants' documents. The ranking design
samples trials and edits one candidate's resume per trial (a keyed choice of position); the change
is that candidate's top-1 indicator."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from popfair.core.errors import ConfigError
from popfair.core.types import FACTUAL, WORLD, Document, Effects, Profiles
from popfair.design.ranking.trials import TRIAL
from popfair.estimate.base import unit_of
from popfair.estimate.controls.placebo import comparison_notes, demographic_effects, placebo_table
from popfair.population.base import GroupsColumns
from popfair.render.base import render_all
from popfair.render.placebo import (
    EDITABLE_KINDS,
    WITHIN_GROUP,
    PlaceboSettings,
    edit_document_text,
    keyed_sample,
    pick_in_unit,
    without_placebo,
)


def placebo_settings(
    renderer: dict[Any, Any] | None, renderer_kind: str, design: str, sequential: bool
) -> tuple[PlaceboSettings | None, dict[Any, Any] | None]:
    """A case's placebo settings (config renderer.placebo, checked before any work) from the renderer's
    resolved settings, and those settings without them (what its documents depend on: the document
    store's identity)."""
    settings = PlaceboSettings.from_config(renderer)
    check_placebo(settings, renderer_kind, sequential, design)
    return settings, None if renderer is None else without_placebo(renderer)


def check_placebo(settings: PlaceboSettings | None, renderer_kind: str, sequential: bool, design: str = "") -> None:
    """ConfigError for placebo edits the case cannot make, before any work."""
    if settings is None:
        return
    if WITHIN_GROUP in settings.edits and design != "population":
        raise ConfigError(
            f"renderer.placebo: within_group gives an applicant another applicant's name and qualifications within "
            f"its own group: the population design (population=popresume), not the {design} design"
        )
    if set(settings.edits) - {WITHIN_GROUP} and renderer_kind not in EDITABLE_KINDS:
        raise ConfigError(
            f"renderer.placebo: edits apply to text and JSON documents, not renderer={renderer_kind}; "
            "use renderer=text (or json) for placebo edits"
        )
    if sequential:
        raise ConfigError(
            "renderer.placebo: not with a sequential audit (sequential.rule); run the placebo edits at fixed n"
        )


@dataclass
class PlaceboSet:
    """The re-screens of one case: the sampled units' rows, which of them carries the edited document
    (`edited`, positions in `rows`; `origin`: the same rows' positions in the case's rows), and per
    edit the documents and the design's prompts."""

    settings: PlaceboSettings
    rows: pd.DataFrame
    edited: np.ndarray
    origin: np.ndarray
    documents: dict[str, list[Document]] = field(default_factory=dict)
    prompts: dict[str, list[Document]] = field(default_factory=dict)
    usable: dict[str, np.ndarray] = field(default_factory=dict)  # per edit, the edited rows it could change

    @property
    def all_prompts(self) -> list[Document]:
        """Every edit's prompts, edit after edit (what is screened beside the case's own prompts)."""
        return [p for edit in self.settings.edits for p in self.prompts[edit]]

    def changes(
        self, design: Any, profiles: Profiles, results: Sequence[Any], scored_rows: pd.DataFrame
    ) -> dict[str, np.ndarray]:
        """Per edit, the change of each edited applicant's answer (edited minus original), where both
        were scored. `results`: the screener's results of `all_prompts`, in order."""
        before = pd.to_numeric(scored_rows["y"], errors="coerce").to_numpy(dtype=float)[self.origin]
        before_ok = scored_rows["error"].isna().to_numpy()[self.origin]
        out, start = {}, 0
        for edit in self.settings.edits:
            prompts = self.prompts[edit]
            answers = results[start : start + len(prompts)]
            start += len(prompts)
            scored = design.scored(profiles, self.rows, self.documents[edit], prompts, answers)
            after = pd.to_numeric(scored["y"], errors="coerce").to_numpy(dtype=float)[self.edited]
            ok = before_ok & scored["error"].isna().to_numpy()[self.edited] & np.isfinite(after) & np.isfinite(before)
            ok &= self.usable.get(edit, np.ones(len(ok), bool))
            out[edit] = (after - before)[ok]
        return out


def placebo_set(
    case: Any, design: Any, profiles: Profiles, rows: pd.DataFrame, documents: Sequence[Document], renderer: Any
) -> PlaceboSet | None:
    """The applicants (ranking: trials) screened again, and the prompts of each edit (None: no edits).
    `case`: the PopulationCase (its placebo settings, seed, population); `renderer`: what renders its
    documents (the within-group world's rows are rendered anew)."""
    settings, seed = case.placebo, case.seed
    if settings is None:
        return None
    factual = np.flatnonzero((rows[WORLD] == FACTUAL).to_numpy()) if WORLD in rows else np.arange(len(rows))
    if TRIAL in rows:  # ranking: whole trials, one candidate's resume edited in each
        trials = rows[TRIAL].to_numpy()[factual]
        starts = np.flatnonzero(np.r_[True, trials[1:] != trials[:-1]])
        sizes = np.diff(np.r_[starts, len(trials)])
        chosen = keyed_sample(trials[starts], settings.n, seed)
        member = pick_in_unit(trials[starts][chosen], sizes[chosen], seed)
        taken = (
            np.concatenate([factual[starts[c] : starts[c] + sizes[c]] for c in chosen]) if len(chosen) else factual[:0]
        )
        offsets = np.cumsum(sizes[chosen]) - sizes[chosen]
        edited = offsets + member
    else:
        taken = factual[keyed_sample(rows["applicant_id"].to_numpy()[factual], settings.n, seed)]
        edited = np.arange(len(taken))
    sample = PlaceboSet(settings, rows.iloc[taken].reset_index(drop=True), edited, taken[edited])
    base = [documents[i] for i in taken]
    for edit in settings.edits:
        docs = list(base)
        if edit == WITHIN_GROUP:  # the population design: one document per row, every row edited
            donated, sample.usable[edit] = within_group_rows(rows, taken, profiles.roles, case.population, seed)
            docs = render_all(renderer, donated.drop(columns=WORLD, errors="ignore"), profiles.jobs, False)
        for j in edited if edit != WITHIN_GROUP else ():
            docs[j] = replace(docs[j], text=edit_document_text(docs[j].text, docs[j].kind, edit))
        sample.documents[edit] = docs
        sample.prompts[edit] = list(design.prompts(profiles, sample.rows, docs))
    return sample


def within_group_rows(
    rows: pd.DataFrame, taken: np.ndarray, roles: Any, population: Any, seed: int
) -> tuple[pd.DataFrame, np.ndarray]:
    """The rows at `taken`, each with the proxies R and qualifications B (and the raw columns they are
    grouped from) of a donor: another factual applicant with the same job, X and Z, chosen by a hash of
    (applicant, seed). Rows without such a donor stay as they are (False in the second value)."""
    grouped = dict(population.grouped_from) if isinstance(population, GroupsColumns) else {}
    role_columns = [*roles.r, *roles.b]
    donated = [c for c in dict.fromkeys(role_columns + [grouped[c] for c in role_columns if c in grouped]) if c in rows]
    keys = [c for c in ("job_id", roles.x, *roles.z) if c in rows]
    factual = (rows[WORLD] == FACTUAL).to_numpy() if WORLD in rows else np.ones(len(rows), bool)
    cell = rows[keys].astype(str).agg("\x1f".join, axis=1).to_numpy()
    members: dict[str, np.ndarray] = {str(k): np.flatnonzero(factual & (cell == k)) for k in pd.unique(cell[taken])}
    hashed = pd.util.hash_pandas_object(
        rows["applicant_id"].iloc[taken].astype(str) + f"\x1fwithin_group\x1f{seed}", index=False
    ).to_numpy()
    donors, usable = np.array(taken), np.zeros(len(taken), bool)
    for i, (row, h) in enumerate(zip(taken, hashed)):
        group = members[str(cell[row])]
        if len(group) > 1:
            own = int(np.searchsorted(group, row))
            donors[i] = group[(own + 1 + int(h % np.uint64(len(group) - 1))) % len(group)]
            usable[i] = True
    out = rows.iloc[taken].reset_index(drop=True)
    out[donated] = rows[donated].iloc[donors].to_numpy()
    return out, usable


def placebo_changes(
    sample: PlaceboSet | None, design: Any, profiles: Profiles, results: Sequence[Any], scored_rows: pd.DataFrame
) -> dict[str, np.ndarray] | None:
    """`PlaceboSet.changes`, or None for a case without placebo edits."""
    return None if sample is None else sample.changes(design, profiles, results, scored_rows)


def with_placebo(
    effects: Effects, changes: dict[str, np.ndarray], estimator: Any, outcome: str, settings: PlaceboSettings
) -> Effects:
    """The effects with a row `placebo.<edit>` per edit (mean change, CI, mean absolute change) in the
    effects' unit, a note per edit comparing each demographic effect with the screener's movement,
    and the rows as artifact placebo.csv."""
    unit = unit_of(estimator, "placebo", outcome)
    table = placebo_table(changes, scale=100.0 if unit == "pp" else 1.0).assign(unit=unit)
    notes = comparison_notes(demographic_effects(effects.table, unit, estimator.name), table, unit)
    effects.table = pd.concat([effects.table, table])
    effects.notes += [f"Placebo controls ({settings.describe()}):", *notes]
    effects.artifacts["placebo.csv"] = table.reset_index()
    return effects
