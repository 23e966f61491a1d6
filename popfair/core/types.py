"""The small typed records that flow between pipeline stages.

population -> Profiles -> render -> Documents -> screen -> scores -> estimate -> Effects
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

if TYPE_CHECKING:  # imported where used: a sweep's process imports pandas beside its composing worker
    import pandas as pd

Outcome = Literal["score", "callback", "rank"]
DocumentKind = Literal["text", "json", "image", "pdf"]
WORLD = "world"  # column naming each row's world in tables with counterfactual rows
FACTUAL = "factual"  # the world of the applicants as sampled (counterfactual worlds carry their own name)
REDRAW_SUFFIX = " [redraw]"  # a world of the second, independent set of worlds (WorldRequest.redraw)


def redraw_world(name: str) -> str:
    """The name of world `name` in the second, independent set of worlds (`WorldRequest.redraw`)."""
    return f"{name}{REDRAW_SUFFIX}"


@dataclass(frozen=True)
class Roles:
    """Standard Fairness Model roles: protected X (levels x0, x1), confounders Z,
    business-necessity mediators B, redlining proxies R. Column names in the profile table.

    Parameters
    ----------
    x : str
        The protected attribute's column (e.g. "gender").
    x0, x1 : str
        Its two levels; positive effects favour x1 (e.g. "female", "male").
    z : tuple of str
        Confounders: columns not caused by X (the other demographic attribute, age).
    b : tuple of str
        Business-necessity mediators (education, experience).
    r : tuple of str
        Redlining proxies (first name, surname, state).
    """

    x: str
    x0: str
    x1: str
    z: tuple[str, ...]
    b: tuple[str, ...]
    r: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"x": self.x, "x0": self.x0, "x1": self.x1, "z": list(self.z), "b": list(self.b), "r": list(self.r)}


@dataclass(frozen=True)
class Job:
    """One job the screener judges applicants against.

    Parameters
    ----------
    job_id : str
        Key of the job; every applicant row names the job it is screened for.
    title : str
        Job title shown to the screener.
    description : str
        Job description shown to the screener.
    attributes : Mapping, optional
        Further fields a prompt may use (a posting's firm, metro area, state, post date, ...).
    """

    job_id: str
    title: str
    description: str
    attributes: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class WorldRequest:
    """Counterfactual worlds an estimator needs scored beside the factual documents.

    Declared by the estimator (its `counterfactuals`) and carried out by the pipeline: the population draws
    the worlds, the renderer and screener treat them like the factual rows (one plan, one cache).

    Parameters
    ----------
    worlds : Mapping of str to (int, int, int)
        Name -> (x_y, x_b, x_r) with 0 = x0 and 1 = x1, the world of
        Y_{x_y, B_{x_b, R_{x_r}}, R_{x_r}} (X set to x_y, B drawn under x_b, R under x_r).
    n : int or None
        Applicants drawn (seeded, without replacement) from the x0/x1 rows; None = all of them
        (or `fraction` of them).
    seed : int
        Seeds the applicant sample and the counterfactual noise (common to all worlds).
    fraction : float, optional
        With n None: this share of the x0/x1 rows (rounded, at least 2), so the budget follows the
        occupation's size.
    redraw : int, default 0
        A second, independent set of the worlds (another seed) for a keyed, nested subsample of the
        drawn applicants: at least this many per group (all of a smaller group's sample), named
        `redraw_world(name)`; it measures how much the worlds' own random redraws move the answers
        (popfair.population.worlds.redraw_sizes). 0: none.
    """

    worlds: Mapping[str, tuple[int, int, int]]
    n: int | None
    seed: int
    fraction: float | None = None
    redraw: int = 0

    def size(self, eligible: int) -> int:
        """Applicants to draw from `eligible` x0/x1 rows."""
        if self.n is not None:
            return min(self.n, eligible)
        if self.fraction is not None:
            return min(eligible, max(2, round(self.fraction * eligible)))
        return eligible


@dataclass
class Profiles:
    """One row per applicant (column `applicant_id`, and `job_id` naming the job it is screened for).

    Parameters
    ----------
    table : DataFrame
        The applicants: profile columns (the roles' columns among them), `applicant_id`, `job_id`.
    roles : Roles
        Which columns are X, Z, B and R.
    jobs : dict of str to Job
        The jobs the applicants are screened for, by `job_id`.
    outcome : {"score", "callback", "rank"}, default "score"
        What the screener is asked.
    notes : list of str, optional
        Caveats shown to the user and logged (e.g. states rebuilt by transport).
    artifacts : dict, optional
        Diagnostics logged with the run: name -> DataFrame, `Plot` or text.
    tags : dict, optional
        MLflow tags (e.g. ``population.source``).
    worlds : DataFrame, optional
        When an estimator declared a `WorldRequest`: the counterfactual rows, the profile columns
        plus `world` (the world's name), world-major, each keeping its applicant's applicant_id.
    """

    table: pd.DataFrame
    roles: Roles
    jobs: dict[str, Job]
    outcome: Outcome = "score"  # what the screener is asked: a 0-100 score, a yes/no callback or a ranking
    notes: list[str] = field(default_factory=list)  # caveats to show the user (e.g. missing states)
    artifacts: dict[str, Any] = field(default_factory=dict)  # diagnostics: name -> DataFrame | Figure | str
    tags: dict[str, str] = field(default_factory=dict)  # run tags (e.g. population.source), logged with the run
    worlds: pd.DataFrame | None = None

    def rows(self) -> pd.DataFrame:
        """Every row to render and screen: the factual applicants (world = FACTUAL), then the worlds."""
        factual = self.table.assign(**{WORLD: FACTUAL})
        if self.worlds is None or self.worlds.empty:
            return factual
        import pandas as pd

        return pd.concat([factual, self.worlds], ignore_index=True)


@dataclass(frozen=True)
class Document:
    """What the screener sees for one applicant: text (text/JSON), and for image documents a PNG
    page, for PDF documents the PDF file (its text layer is `text`).

    Parameters
    ----------
    applicant_id : str
        The applicant (or counterfactual world row) the document was rendered from.
    job_id : str
        The job it is screened for.
    kind : {"text", "json", "image", "pdf"}
        What the screener is sent.
    text : str
        Resume text, JSON profile, or the PDF's text layer.
    image_png : bytes, optional
        The rendered page for image documents.
    profile : Mapping, optional
        The structured profile row; only structural screeners (simulated) may read it.
    pdf : bytes, optional
        The PDF file for PDF documents.
    """

    applicant_id: str
    job_id: str
    kind: DocumentKind
    text: str
    image_png: bytes | None = None
    # The structured profile row the document was rendered from. Screeners that call a model
    # must not read it (the model sees only text/image); structural screeners (simulated) may.
    profile: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)
    pdf: bytes | None = field(default=None, repr=False)


class ScreenResult(NamedTuple):
    """A screener's answer for one document: parsed value or a recorded failure, never silent.
    Immutable; a named tuple because a cached rerun makes 60,000 of them (a third the cost of a
    frozen dataclass)."""

    applicant_id: str
    raw: str | None
    value: float | None
    error: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    cached: bool = False


@dataclass(frozen=True)
class CallPlan:
    """What screening a set of documents would cost, computed without calling anything."""

    calls: int
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    cached: int = 0  # distinct prompts already answered in the response cache (reused, not paid)


@dataclass(frozen=True)
class Plot:
    """A figure a stage asks for, as data: `popfair.track.figures.draw` turns it into a matplotlib
    Figure when the run is logged, so estimators and populations stay free of plotting code.
    kind: "forest" (effects with CIs; options: series), "impact_ratio" (options: dimensions,
    flag_below, alpha), "trend" (rates and ratios by period; options: periods, dimensions, flag_below,
    flagged), "qq" or "age_experience" (population diagnostics); table: what is drawn; keep: its PNG
    kept on disk for later processes (popfair.track.figures.png)."""

    kind: str
    table: pd.DataFrame
    title: str = ""
    options: Mapping[str, Any] = field(default_factory=dict)
    # drawn once per machine: its PNG is kept in popfair's disk cache (a population's diagnostics, the
    # same for every screener of a sweep and every rerun, each case otherwise in a fresh process)
    keep: bool = False


@dataclass
class Effects:
    """An estimator's output: a table indexed by effect name with columns
    estimate, se, ci_low, ci_high (plus estimator-specific columns), pattern labels, extra metrics.

    Parameters
    ----------
    table : DataFrame
        One row per effect (TE, NDE, ..., gap, impact ratios): estimate, se, ci_low, ci_high, and
        p_value / significant where the estimator reports them.
    labels : list of str, optional
        Pattern labels of the case (PopResume's Case 1-5); `case` joins them.
    metrics : dict, optional
        Extra scalars logged to MLflow (overlap diagnostics, counts, ...).
    artifacts : dict, optional
        Files logged with the run: name -> DataFrame, `Plot` or text.
    detail : object, optional
        The estimator's own result (e.g. `ImpactRatios`) for reports built in the same run.
    notes : list of str, optional
        Plain-words lines the console and the report print under the table (what the effects
        mean for this case: the estimand, a coarser split offered where the fine one is not identified).
    """

    table: pd.DataFrame
    labels: list[str] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    artifacts: dict[str, Any] = field(default_factory=dict)  # name -> DataFrame | Plot | str
    detail: Any = None  # the estimator's own result (e.g. ImpactRatios) for reports built in the same run
    notes: list[str] = field(default_factory=list)  # printed under the table (console, report)

    @property
    def pattern(self) -> str:
        """The PopResume discrimination patterns (section 5.2) the effects show, or "none"."""
        return "; ".join(self.labels) if self.labels else "none"


@dataclass(frozen=True)
class Check:
    """One pre-flight check (`popfair doctor`, the sweep's checks before case 1): what was checked
    (`name`: key, extra, config, cache, tracking, disk, launcher, endpoint, ...), whether it passed,
    one line saying what was found, and the fix when it failed."""

    name: str
    ok: bool
    detail: str
    fix: str | None = None
