"""The comparison report of a sweep or an MLflow experiment: CSV, Markdown and one self-contained
HTML page (figures embedded as base64 PNG).

It reads top down as a reader wants it: first the whole grid at a glance, then the tallies, then the
detail. PopResume cases: one figure of every case's effects (CIs excluding 0 marked), the number of
cases per discrimination pattern (the paper's section 5.2 tally), then the effects with CIs and
pattern labels per case and a forest plot per case. Callback panel (estimator paired_gap): the
forest of every model's gap per axis (the paper's figure), then the paper's table per axis with
Bonferroni across the models of that axis, gaps by release date and race vs gender gaps."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd

from popfair.core.errors import DataError, PopfairError
from popfair.estimate.registry import ESTIMATORS, in_section
from popfair.report import panel, patterns, plots, ranking
from popfair.report.document import Block, to_html, to_markdown, to_pdf
from popfair.report.runs import effects_long, load_runs
from popfair.report.sweep_cases import CASE_KEYS, case_rows, provenance_line


def popresume_effects(effects: pd.DataFrame) -> pd.DataFrame:
    """Effects of the score-based (non-paired, non-ranking) cases, one row per case x effect."""
    if effects.empty:
        return effects
    rows = effects[effects["estimator"].isin(in_section("effects")) | ~effects["estimator"].isin(ESTIMATORS)]
    if "design" in rows:  # table audits have no occupation, format or model: their own section
        rows = rows[rows["design"].ne("table") | rows["design"].isna()]
    rows = rows.assign(identified=rows["identified"].fillna(True).astype(bool) if "identified" in rows else True)
    rows = rows.assign(variant=rows["variant"].fillna("") if "variant" in rows else "")
    rows = rows.assign(context=rows["context"].fillna("") if "context" in rows else "")
    keep = (
        CASE_KEYS
        + [
            "estimator",
            "effect",
            "estimate",
            "se",
            "ci_low",
            "ci_high",
            "p_value",
            "significant",
            "identified",
            "pattern",
            "case_name",
            "run_id",
        ]
        + [c for c in ("unit",) if c in rows]
    )  # the effects' unit, from runs that log it (tag unit)
    order = {e: i for i, e in enumerate(plots.PSE_ORDER)}
    return (
        rows[keep]
        .assign(_o=rows["effect"].map(order).fillna(99))
        .sort_values(CASE_KEYS + ["_o"])
        .drop(columns="_o")
        .reset_index(drop=True)
    )


def case_table(pse: pd.DataFrame) -> pd.DataFrame:
    """One row per case: each effect as `estimate [ci_low, ci_high]` with * when significant ("not
    identified" where the data cannot answer it, popfair.estimate.pse.identification), and the
    patterns that apply to the case's format (no Case 1 where the resume shows a photo)."""
    if pse.empty:
        return pse
    pse = pse.assign(variant=pse["variant"].fillna("") if "variant" in pse else "")
    pse = pse.assign(context=pse["context"].fillna("") if "context" in pse else "")
    pse = pse.assign(
        pattern=[("; ".join(patterns.applicable_labels(p, f)) or "none") for p, f in zip(pse["pattern"], pse["format"])]
    )
    cell = pse.apply(
        lambda r: (
            f"{r['estimate']:+.3g} [{r['ci_low']:+.3g}, {r['ci_high']:+.3g}]" + ("*" if r["significant"] else "")
            if bool(r.get("identified", True))
            else "not identified"
        ),
        axis=1,
    )
    unit = ["unit"] if "unit" in pse else []  # every table names its unit
    pse = pse.assign(unit=pse["unit"].fillna("")) if unit else pse
    wide = pse.assign(cell=cell).pivot_table(
        index=CASE_KEYS + ["pattern", *unit], columns="effect", values="cell", aggfunc="first", dropna=False
    )
    columns = [e for e in plots.PSE_ORDER if e in wide.columns] + sorted(set(wide.columns) - set(plots.PSE_ORDER))
    table = wide[columns].reset_index().dropna(subset=columns, how="all")
    # the context column where the cases' contexts differ (a context sweep), variant where any is set
    dropped = [c for c in ("context",) if table[c].nunique() <= 1] + [
        c for c in ("variant",) if not table[c].astype(bool).any()
    ]
    return table.drop(columns=dropped)


UNDATED = "1900-01-01"  # sort key for models whose screener config has no release date (shown blank)


def panel_results(effects: pd.DataFrame) -> pd.DataFrame:
    """One panel input row (popfair.report.panel) per model x axis of the paired_gap cases."""
    rows = effects[effects["estimator"].isin(in_section("paired"))]
    rows = rows.drop_duplicates(["model", "protected_attr"], keep="last")
    return pd.DataFrame(
        [
            {**panel.panel_row(r["model"], r["protected_attr"], r["release_date"], r.to_dict()), "run_id": r["run_id"]}
            for _, r in rows.iterrows()
        ]
    )


def panel_blocks(
    effects: pd.DataFrame, out: Path, alpha: float, csv: Callable[[str, pd.DataFrame], None]
) -> list[Block]:
    """The callback panel: the paper's table per axis (Bonferroni across that axis's models), gaps
    by release date, and race vs gender gaps with their correlation."""
    results = panel_results(effects)
    if results.empty:
        return []
    dated = pd.to_datetime(results["release_date"], errors="coerce", format="mixed").notna()
    filled = results.assign(release_date=results["release_date"].where(dated, UNDATED))
    blocks = [Block("h2", "Callback panel")]
    if not dated.all():
        blocks.append(
            Block(
                "text",
                "No release date in the screener config of: "
                + ", ".join(sorted(set(results.loc[~dated, "model"])))
                + " (ordered by name, release date left blank).",
            )
        )
    tables, details = {}, []
    for axis, group in filled.groupby("axis", sort=True):
        try:
            table = panel.panel_tables(group, alpha=alpha)[str(axis)]
            heading = f"Axis: {axis} ({panel.bonferroni_note(str(axis), len(table), alpha)}, cluster-robust p)"
            tables[str(axis)] = table
        except PopfairError as exc:  # e.g. one model: no Bonferroni family
            table, heading = group.drop(columns="axis"), f"Axis: {axis} ({exc})"
        table = table.assign(release_date=table["release_date"].astype(str).replace(UNDATED, ""))
        csv(f"panel_{axis}.csv", table)
        details += [Block("h3", heading), Block("table", table)]
    if tables:  # first the panel at a glance (the paper's figure), then the tables
        tables = {a: t.assign(release_date=t["release_date"].replace(UNDATED, "undated")) for a, t in tables.items()}
        blocks += [
            Block("text", "Every model's callback gap with its 95% CI per axis; filled: Bonferroni-significant."),
            Block("figure", _save(panel.panel_forest(tables), out / "plots" / "panel_forest.png")),
        ]
    blocks += details
    if dated.all():
        figure = panel.gap_chart(filled)
    else:
        figure = plots.panel_gaps_by_model(results.rename(columns={"gap_pp": "estimate", "axis": "protected_attr"}))
    blocks.append(Block("figure", _save(figure, out / "plots" / "panel_gaps.png")))
    scatter = plots.race_vs_gender(results.rename(columns={"gap_pp": "estimate", "axis": "protected_attr"}))
    if scatter is not None:
        blocks.append(Block("figure", _save(scatter, out / "plots" / "race_vs_gender.png")))
        try:
            correlation = panel.race_gender_correlation(filled)
            blocks += [
                Block("h3", "Race vs gender gaps across models"),
                Block("table", correlation.to_frame("value").reset_index(names="statistic")),
            ]
        except PopfairError as exc:
            blocks.append(Block("text", f"Race-gender correlation not computed: {exc}"))
    return blocks


def photo_pairs(pse: pd.DataFrame) -> pd.DataFrame:
    """NDE of the same VLM, occupation and attribute without (image) and with photo (image_photo),
    with the section 5.3 comparison (patterns.photo_comparison)."""
    nde = pse[(pse["effect"] == "NDE") & pse["format"].isin(["image", "image_photo"])]
    if nde.empty:
        return nde
    wide = nde.pivot_table(
        index=["model", "occupation", "protected_attr"],
        columns="format",
        values=["estimate", "ci_low", "ci_high"],
        aggfunc="first",
    )
    wide.columns = [f"{value}_{fmt}" for value, fmt in wide.columns]
    needed = ["estimate_image", "estimate_image_photo"]
    if not set(needed) <= set(wide.columns):
        return pd.DataFrame()
    return patterns.photo_comparison(wide.dropna(subset=needed).reset_index())


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")[:120]


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def table_blocks(effects: pd.DataFrame, csv: Any) -> list[Block]:
    """The table audits of the sweep (design=table), side by side: per effect, each file's estimate and
    interval, with the run ids; written as table_audits.csv."""
    if effects.empty or "design" not in effects:
        return []
    rows = effects[effects["design"].eq("table")]
    if rows.empty:
        return []
    rows = rows.assign(unit=rows["unit"].fillna("ratio")) if "unit" in rows else rows.assign(unit="ratio")
    columns = [
        c
        for c in ("source", "run_id", "estimator", "effect", "estimate", "ci_low", "ci_high", "unit", "p_value")
        if c in rows
    ]
    rows = rows.assign(source=[_shown_source(v) for v in rows["source"]]) if "source" in rows else rows
    table = rows[columns].sort_values(["effect", "source"], kind="stable")
    csv("table_audits.csv", table)
    wide = table.pivot_table(index="effect", columns="source", values="estimate", aggfunc="first")
    runs = rows.drop_duplicates("run_id")[["source", "run_id", "case_name"]]
    return [
        Block("h2", "Table audits"),
        Block("text", f"{len(runs)} tables audited; each file's run, then each effect's estimate per file."),
        Block("table", runs),
        Block("table", wide.reset_index()),
    ]


def _shown_source(source: Any) -> Any:
    """A table audit's source as the report names it: a file by its name (the run's table.sha256 says
    which file), a database by its URL without password and the table or query."""
    text = str(source) if isinstance(source, str) else source
    return Path(text).name if isinstance(text, str) and "://" not in text else text


def sequential_blocks(runs: pd.DataFrame) -> list[Block]:
    """The sequential cases (config `sequential`): looks, answers used against the fixed-n plan, why
    each stopped, and its anytime-valid and fixed-n intervals at the stop, in plain words."""
    rows = []
    for run in runs[runs["status"] == "FINISHED"].itertuples(index=False):
        m = run.metrics
        if "sequential.looks" not in m:
            continue
        rows.append(
            {
                "case": run.case_name,
                "looks": f"{m['sequential.looks']:.0f} of {m.get('sequential.looks_planned', float('nan')):.0f}",
                "n used": f"{m['sequential.n_used']:.0f} of {m['sequential.n_planned']:.0f}",
                "answers not needed": f"{100 * m.get('sequential.saved_share', 0.0):.0f}%",
                "stopped because": run.stopped_by,
                "anytime-valid CI": _interval(m, "sequential.anytime_low", "sequential.anytime_high"),
                "fixed-n CI (n used)": _interval(m, "sequential.fixed_n_low", "sequential.fixed_n_high"),
            }
        )
    if not rows:
        return []
    return [
        Block("h2", "Sequential cases"),
        Block(
            "text",
            "These cases asked the tool in batches and stopped when the target effect's anytime-valid "
            "confidence interval (valid at every look at once) settled the question, or when the planned "
            "n was spent. The fixed-n interval of the answers used is shown beside it; it would be valid "
            "only had that n been planned without looking.",
        ),
        Block("table", pd.DataFrame(rows)),
    ]


def _interval(metrics: dict[str, float], low: str, high: str) -> str:
    return f"[{metrics[low]:.4g}, {metrics[high]:.4g}]" if low in metrics and high in metrics else "-"


def power_blocks(runs: pd.DataFrame, csv: Any) -> list[Block]:
    """What each case's main test can detect at its n (the runs' plan.* metrics and tags), in plain
    words; written as power.csv. Nothing when no run logged a power line."""
    if "detects" not in runs or runs["detects"].isna().all():
        return []
    rows = runs[runs["detects"].notna()]
    metric = lambda name: [m.get(name) for m in rows["metrics"]]  # noqa: E731
    table = pd.DataFrame(
        {
            "case_name": rows["case_name"],
            "n": metric("plan.n"),
            "units": rows["units"],
            "detects": rows["detects"],
            "power": metric("plan.power"),
            "alpha": metric("plan.alpha"),
            "n_needed_for_plan_effect": metric("plan.n_needed"),
            "run_id": rows["run_id"],
        }
    )
    csv("power.csv", table)
    return [
        Block("h2", "What the audits can and cannot detect"),
        Block(
            "text",
            "Each case's main test detects an effect at least as large as `detects` with the stated power at the "
            "stated two-sided alpha (config plan.*; the assumptions are the run's plan.assumptions tag). A smaller "
            "effect can go undetected: a case whose effect is not significant has not shown that there is no "
            "effect, only that one as large as its `detects` would probably have been seen.",
        ),
        Block(
            "table",
            table.drop(columns=["n_needed_for_plan_effect"] if table["n_needed_for_plan_effect"].isna().all() else []),
        ),
    ]


def write_report(
    tracking_uri: str,
    experiment_name: str | None,
    out_dir: str | Path,
    *,
    parent_run_id: str | None = None,
    alpha: float = 0.05,
) -> dict[str, Path]:
    """Read the runs, write CSV tables, plots/*.png, report.md and report.html into out_dir."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    runs = load_runs(tracking_uri, experiment_name, parent_run_id)
    source = f"sweep parent run {parent_run_id}" if parent_run_id else f"experiment {experiment_name!r}"
    if runs.empty:
        raise DataError(f"no case runs in {source} at {tracking_uri}")
    effects = effects_long(runs, alpha)
    files: dict[str, Path] = {}

    def csv(name: str, table: pd.DataFrame) -> None:
        files[name] = out / name
        table.to_csv(files[name], index=False)

    csv("runs.csv", runs.drop(columns=["metrics", "not_identified"], errors="ignore"))
    csv("effects.csv", effects)
    finished = int((runs["status"] == "FINISHED").sum())
    failed = runs[runs["status"] != "FINISHED"]
    heading, origin = report_title(tracking_uri, experiment_name, parent_run_id, len(runs))
    blocks = [
        Block(
            "text",
            f"{provenance_line()} Source: {origin}. {len(runs)} cases: {finished} finished, "
            f"{len(failed)} not finished. Significance: p < {alpha} where the estimator "
            f"reports a p-value, else the {100 * (1 - alpha):.0f}% CI excludes 0 (*). Effects the data "
            'cannot answer at a case\'s n read "not identified".',
        )
    ]
    if len(failed):
        blocks += [Block("h2", "Failed cases"), Block("table", failed[["case_name", "status", "error", "run_id"]])]

    pse = popresume_effects(effects)
    if not pse.empty:  # first every case at a glance, then the pattern counts, then the detail
        cases, tally = case_table(pse), patterns.pattern_tally(pse)
        csv("cases.csv", case_rows(pse))  # one row per case, every effect's numbers and the unit
        csv("popresume_effects.csv", pse)
        csv("popresume_cases.csv", cases)
        csv("pattern_tally.csv", tally)
        files["effects_overview.png"] = _save(plots.effects_overview(pse), out / "plots" / "effects_overview.png")
        blocks += [
            Block("h2", "All cases at a glance"),
            Block(
                "text",
                "One cell per case x effect. Colour follows significance: an effect whose "
                f"{100 * (1 - alpha):.0f}% CI excludes 0 is coloured by its estimate (red favours x1, blue x0) "
                "and outlined; the others show their estimate in grey on white; hatched cells are not "
                "identified at the case's n. Details per case follow.",
            ),
            Block("figure", files["effects_overview.png"]),
            Block(
                "text",
                "Every case's effects with their 95% CIs on one x scale, one panel per effect (red: the CI "
                "excludes 0).",
            ),
            Block("figure", _save(plots.cases_forest(pse), out / "plots" / "cases_forest.png")),
            Block("h2", "Cases per discrimination pattern"),
            Block(
                "text",
                "As PopResume section 5.2 counts them: Case 1 (NDE != 0 without explicit "
                "demographics) over the text and image cases only, Cases 2-5 over all "
                "cases; `paper` is the paper's count on its 120-case grid.",
            ),
            Block("table", tally),
            Block("h2", "Effects per case"),
            Block("table", cases),
        ]
        pairs = photo_pairs(pse)
        fig = plots.photo_vs_no_photo(pairs)
        if fig is not None:
            summary = patterns.photo_summary(pairs)
            csv("photo_vs_no_photo_nde.csv", pairs)
            csv("photo_vs_no_photo_summary.csv", summary)
            files["photo_vs_no_photo.png"] = _save(fig, out / "plots" / "photo_vs_no_photo.png")
            blocks += [
                Block("h3", "With-photo vs without-photo NDE"),
                Block(
                    "text",
                    "Section 5.3: pairs (VLM x occupation x attribute) whose |NDE| grows "
                    "with the photo and whose with-photo CI excludes the no-photo NDE "
                    "(popfair's reading of 'increases noticeably'; the paper: 8 of its 20 "
                    "gender pairs).",
                ),
                Block("table", summary),
                Block("figure", files["photo_vs_no_photo.png"]),
            ]
        blocks.append(Block("h3", "Forest plots per case (one x scale)"))
        xlim = plots.shared_xlim(pse[pse["identified"]])
        for keys, case in pse.groupby([*CASE_KEYS, "estimator"], dropna=False, sort=True):
            # the estimator kept, no empty part, and the default context (none) not named
            shown = [
                str(k)
                for k, c in zip(keys, [*CASE_KEYS, "estimator"])
                if str(k) and str(k) != "nan" and not (c == "context" and str(k) == "none")
            ]
            path = _save(
                plots.forest_plot(case, " / ".join(shown), xlim),
                out / "plots" / "forest" / f"{_slug('-'.join(shown))}.png",
            )
            files[f"forest/{path.name}"] = path
            blocks.append(Block("figure", path))

    blocks += sequential_blocks(runs)
    blocks += table_blocks(effects, csv)
    blocks += power_blocks(runs, csv)
    blocks += panel_blocks(effects, out, alpha, csv)
    blocks += ranking.ranking_blocks(effects, runs, lambda fig, name: _save(fig, out / "plots" / name), csv)
    files.update({f"plots/{p.name}": p for p in (out / "plots").glob("*.png")})

    files["report.md"] = out / "report.md"
    files["report.md"].write_text(to_markdown(heading, blocks, out))
    files["report.html"] = out / "report.html"
    files["report.html"].write_text(to_html(heading, blocks))
    files["report.pdf"] = out / "report.pdf"  # as the case reports: the same blocks, A4
    files["report.pdf"].write_bytes(to_pdf(heading, blocks, footer=f"{heading} | {provenance_line()}"))
    files["comparison.md"] = out / "comparison.md"  # the parent run's description: the tables, no figures
    files["comparison.md"].write_text(comparison_markdown(heading, blocks, out))
    return files


def report_title(
    tracking_uri: str, experiment_name: str | None, parent_run_id: str | None, cases: int
) -> tuple[str, str]:
    """A human title for the report (the sweep's name and date, or the experiment's) and the line
    naming its source: the runs and the tracking store by its file name or server, no local path."""
    from popfair.runtime.secrets import safe_url

    store = (
        Path(tracking_uri.removeprefix("sqlite:///")).name
        if tracking_uri.startswith("sqlite:")
        else safe_url(tracking_uri)
    )
    if not parent_run_id:
        name = experiment_name or "popfair"
        return (
            f"Comparison of {cases} cases: MLflow experiment {name}",
            f"the runs of MLflow experiment {name} in {store}",
        )
    from mlflow import MlflowClient

    parent = MlflowClient(tracking_uri).get_run(parent_run_id)
    day = dt.datetime.fromtimestamp(parent.info.start_time / 1000, dt.timezone.utc).date().isoformat()
    sweep = parent.data.tags.get("sweep.experiment", "none")
    varying = parent.data.tags.get("sweep.varying", "none")
    what = f"experiment={sweep}" if sweep != "none" else f"varying {varying.replace(',', ', ')}"
    title = f"Sweep comparison: {cases} cases ({what}), {day}"
    return title, f"the case runs of sweep {parent.info.run_name} (MLflow parent run {parent_run_id}) in {store}"


MAX_COMPARISON = 7_900  # MLflow keeps tag values up to 8,000 characters


def comparison_markdown(title: str, blocks: list[Block], out: Path) -> str:
    """The report's headings, text and tables in Markdown, without figures: the parent run's
    description (cut to what MLflow keeps; report.html holds everything). A text right before a
    figure is its caption and goes with it."""
    kept = [
        b
        for i, b in enumerate(blocks)
        if b.kind != "figure" and not (b.kind == "text" and i + 1 < len(blocks) and blocks[i + 1].kind == "figure")
    ]
    # a heading with nothing under it once the figures are gone (the forest plots) goes too
    shown = [
        b
        for i, b in enumerate(kept)
        if b.kind not in ("h2", "h3") or (i + 1 < len(kept) and kept[i + 1].kind not in ("h2", "h3"))
    ]
    text = to_markdown(title, shown, out)
    if len(text) > MAX_COMPARISON:
        text = text[: MAX_COMPARISON - 80].rsplit("\n", 1)[0] + "\n\n*(cut: the report/ artifacts hold the rest)*\n"
    return text
