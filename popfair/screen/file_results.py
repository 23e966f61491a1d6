"""FileScreener (`screener=file`): audit a tool that only takes uploads, through files.

`popfair-export` writes the case's documents as the tool receives them into `screener.dir`
(`documents/<document id>.<txt|json|png|pdf>`, `manifest.csv`, `jobs.csv`, `README.txt`); nothing
written there names an applicant or a protected attribute (ids come from the content,
popfair/render/files.py). The tool scores them; its results sheet (CSV, Excel or Parquet, keyed by
document id, column names mapped in `screener.columns`) is read back by this screener.

Every imported answer is stored in the response cache under the tool's name and the document id, so
a partial sheet gives failures only for the documents it lacks, and a later sheet holding only those
completes the case without anything being scored again. Problems are reported by file and row,
never dropped: unknown ids, ids repeated with different values, empty ids and unparseable values
(the document gets a recorded failure naming the row), and documents no sheet has answered. They are
logged, written to `<dir>/import_report.csv`, counted in the `screen.file_*` metrics, and with
`strict: true` stop the case instead."""

from __future__ import annotations

import hashlib
import logging
import math
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from popfair.core.errors import DataError, require
from popfair.core.types import CallPlan, Document, Job, Outcome, ScreenResult
from popfair.render.files import document_file, document_id
from popfair.screen.base import Screener, one_answer_per_prompt
from popfair.screen.values import ValueMapping
from popfair.store.responses import CachedAnswer, open_cache

log = logging.getLogger("popfair.screen")

FORMATS = {".csv": "CSV", ".xlsx": "Excel", ".xlsm": "Excel", ".parquet": "Parquet"}
MANIFEST, JOBS, REPORT, README = "manifest.csv", "jobs.csv", "import_report.csv", "README.txt"


@dataclass(frozen=True)
class Problem:
    file: str
    row: int | None  # as a spreadsheet shows it (header = row 1); Parquet: record number from 1
    document_id: str | None
    problem: str

    def line(self) -> str:
        where = f"{self.file} row {self.row}" if self.row is not None else self.file
        return f"{where}: {self.problem}"

    @property
    def kind(self) -> str:
        """missing | unknown_id | duplicate_id | empty_id | unparseable (the metric it counts in)."""
        if self.row is None:
            return "missing"
        if self.document_id is None:
            return "empty_id"
        if self.problem.startswith("unknown document id"):
            return "unknown_id"
        return "duplicate_id" if "appears in rows" in self.problem else "unparseable"


@dataclass(frozen=True)
class ExportSummary:
    dir: Path
    documents: int  # documents of the case
    files: int  # distinct documents written (identical documents share one file)
    skipped_answered: int  # left out because an imported answer exists (export_missing_only)


class FileScreener(Screener):
    """Reads a tool's results sheets for the case's documents. `results`: one path or a list (later
    sheets win over earlier ones and over earlier imports); relative paths are under `dir`."""

    audits_a_tool = True  # the run writes the auditor's report (popfair/report/audit.py)
    plans_real_documents = True  # dry runs plan the PNG pages themselves (keys and files need them)

    def __init__(
        self,
        dir: str,
        results: str | Sequence[str] | None = "results.csv",
        name: str = "file",
        display_name: str | None = None,
        columns: Mapping[str, str] | None = None,
        values: Mapping[str, Any] | None = None,
        sheet: str | int | None = None,
        strict: bool = False,
        export_missing_only: bool = False,
        cache_dir: str = ".popfair_cache",
        cache_url: str | None = None,
        samples: int = 1,
    ) -> None:
        one_answer_per_prompt(name, samples, "reads one answer per document from the tool's results files")
        require(isinstance(dir, str) and bool(dir), "screener.dir", "must be the exchange folder (export and results)")
        require(bool(name), "screener.name", "must be non-empty (it keys the imported answers in the cache)")
        chosen = {"id": "document_id", "value": "score", **dict(columns or {})}
        require(
            set(chosen) == {"id", "value"} and all(isinstance(v, str) and v for v in chosen.values()),
            "screener.columns",
            f"must map id and value to column names of the results sheet, got {chosen}",
        )
        paths = [] if results is None else [results] if isinstance(results, str) else list(results)
        for path in paths:
            require(
                Path(path).suffix.lower() in FORMATS,
                "screener.results",
                f"{path}: unsupported file type; use {', '.join(FORMATS)}",
            )
        require(isinstance(strict, bool), "screener.strict", f"must be true or false, got {strict!r}")
        self.dir, self.name, self.display_name = Path(dir).expanduser(), name, display_name or name
        self.results = [p if Path(p).is_absolute() else str(self.dir / p) for p in paths]
        self.columns, self.sheet, self.strict = chosen, sheet, strict
        self.export_missing_only = bool(export_missing_only)
        self.values = ValueMapping.from_config(values, "screener.values")
        self.cache = open_cache(cache_url or cache_dir)
        self.last_stats: dict[str, float] = {}
        self.problems: list[Problem] = []

    def __repr__(self) -> str:
        return f"FileScreener(name={self.name!r}, dir={str(self.dir)!r})"

    def _key(self, identifier: str) -> str:
        return hashlib.sha256(f"file-tool\0{self.name}\0{identifier}".encode()).hexdigest()

    # --- export ---------------------------------------------------------------------------------
    def export(self, jobs: Mapping[str, Job], documents: Sequence[Document]) -> ExportSummary:
        """Write each distinct document once, the manifest (document_id, file, job_id, media_type),
        the jobs sheet and instructions. With export_missing_only, documents already answered by an
        imported sheet are left out."""
        ids = [document_id(d) for d in documents]
        answered = set(self.cache.get_many(self._key(i) for i in ids)) if self.export_missing_only else set()
        folder = self.dir / "documents"
        folder.mkdir(parents=True, exist_ok=True)
        rows, seen, skipped = [], set(), 0
        for identifier, document in zip(ids, documents):
            if identifier in seen:
                continue
            seen.add(identifier)
            if self._key(identifier) in answered:
                skipped += 1
                continue
            file = document_file(document, identifier)
            (folder / file.file_name).write_bytes(file.data)
            rows.append(
                {
                    "document_id": identifier,
                    "file": f"documents/{file.file_name}",
                    "job_id": document.job_id,
                    "media_type": file.media_type,
                }
            )
        pd.DataFrame(rows, columns=["document_id", "file", "job_id", "media_type"]).to_csv(
            self.dir / MANIFEST, index=False
        )
        used = {d.job_id for d in documents}
        pd.DataFrame(
            [
                {"job_id": j.job_id, "title": j.title, "description": j.description}
                for j in jobs.values()
                if j.job_id in used
            ]
        ).to_csv(self.dir / JOBS, index=False)
        (self.dir / README).write_text(
            f"Documents to score: {len(rows)} files listed in {MANIFEST} (document_id, file, job_id).\n"
            f"Each is to be judged against its job in {JOBS} (job_id, title, description).\n"
            f"Return one row per document_id in a CSV, Excel or Parquet file with the columns\n"
            f"  {self.columns['id']}: the document_id\n  {self.columns['value']}: the tool's score or decision\n",
            encoding="utf-8",
        )
        return ExportSummary(self.dir, len(documents), len(rows), skipped)

    # --- import ---------------------------------------------------------------------------------
    def _read(self, path: str) -> pd.DataFrame:
        file = Path(path)
        if not file.is_file():
            raise DataError(
                f"screener.results: results file {file} does not exist. Export the documents "
                f"(popfair-export ... screener=file screener.dir={self.dir}), have the tool score "
                f"them, and save its results there"
            )
        kind = FORMATS[file.suffix.lower()]
        try:
            if kind == "CSV":
                table = pd.read_csv(file, dtype=str, keep_default_na=False)
            elif kind == "Excel":
                table = pd.read_excel(file, sheet_name=self.sheet or 0, dtype=object)
            else:
                table = pd.read_parquet(file)
        except Exception as exc:  # noqa: BLE001 - each reader raises its own types for a broken file
            raise DataError(f"screener.results: cannot read {file} as {kind}: {type(exc).__name__}: {exc}") from None
        missing = [c for c in self.columns.values() if c not in table.columns]
        if missing:
            raise DataError(
                f"screener.results: {file} lacks columns {missing} (screener.columns maps id and "
                f"value to them); its columns are {list(map(str, table.columns))}"
            )
        return table

    def _import(self, wanted: set[str], outcome: Outcome) -> tuple[dict[str, tuple[str, str]], list[Problem]]:
        """Read every results sheet; cache the answers it gives for the case's documents. Returns
        document id -> (where, failure) for rows that cannot be used, and all problems by row."""
        failures: dict[str, tuple[str, str]] = {}
        problems: list[Problem] = []
        for path in self.results:
            table = self._read(path)
            offset = 1 if Path(path).suffix.lower() == ".parquet" else 2
            name = Path(path).name
            by_id: dict[str, list[tuple[int, Any]]] = defaultdict(list)
            for i, (raw_id, raw) in enumerate(zip(table[self.columns["id"]], table[self.columns["value"]])):
                row = i + offset
                identifier = (
                    "" if raw_id is None or (isinstance(raw_id, float) and math.isnan(raw_id)) else str(raw_id).strip()
                )
                if not identifier:
                    problems.append(Problem(name, row, None, "empty document id"))
                elif identifier not in wanted:
                    problems.append(
                        Problem(
                            name, row, identifier, f"unknown document id {identifier!r} (not a document of this case)"
                        )
                    )
                else:
                    by_id[identifier].append((row, raw))
            stamp = time.time()
            for identifier, entries in by_id.items():
                rows = [row for row, _ in entries]
                parsed = [(row, raw, *self.values.parse(raw, outcome)) for row, raw in entries]
                if len(entries) > 1:
                    distinct = {str(raw) for _, raw in entries}
                    message = f"document id {identifier} appears in rows {', '.join(map(str, rows))}" + (
                        f" with different values {sorted(distinct)}" if len(distinct) > 1 else ""
                    )
                    problems.append(Problem(name, rows[0], identifier, message))
                    if len(distinct) > 1:
                        failures[identifier] = (f"{name} rows {', '.join(map(str, rows))}", message)
                        continue
                row, raw, value, problem = parsed[0]
                if problem is not None:
                    problems.append(Problem(name, row, identifier, f"unparseable value: {problem}"))
                    failures[identifier] = (f"{name} row {row}", f"unparseable value: {problem}")
                    continue
                failures.pop(identifier, None)  # a later sheet fixes an earlier sheet's bad row
                self.cache.put(
                    self._key(identifier),
                    "file",
                    self.name,
                    CachedAnswer(
                        raw=str(raw),
                        value=value,
                        parse_error=None,
                        input_tokens=0,
                        output_tokens=0,
                        cost_usd=0.0,
                        latency_s=0.0,
                        created_at=stamp,
                    ),
                )
        return failures, problems

    def screen(self, jobs: Mapping[str, Job], documents: Sequence[Document], outcome: Outcome) -> list[ScreenResult]:
        """One result per document: the tool's imported answer, or a failure naming the row or the
        missing answer."""
        require(outcome in ("score", "callback"), "outcome", f"must be score or callback, got {outcome!r}")
        require(bool(self.results), "screener.results", "name the tool's results file(s)")
        ids = [document_id(d) for d in documents]
        failures, problems = self._import(set(ids), outcome)
        cached = self.cache.get_many(self._key(i) for i in set(ids))
        results, missing = [], set()
        for identifier, document in zip(ids, documents):
            found = cached.get(self._key(identifier))
            if identifier in failures:
                where, message = failures[identifier]
                results.append(
                    ScreenResult(
                        document.applicant_id, raw=found.raw if found else None, value=None, error=f"{where}: {message}"
                    )
                )
                continue
            if found is None:
                missing.add(identifier)
                results.append(
                    ScreenResult(
                        document.applicant_id,
                        raw=None,
                        value=None,
                        error=f"no result for document {identifier} in {', '.join(Path(p).name for p in self.results)}",
                    )
                )
                continue
            value, problem = self.values.parse(found.raw, outcome)  # the mapping may have changed
            results.append(
                ScreenResult(
                    document.applicant_id,
                    raw=found.raw,
                    value=value,
                    error=None if problem is None else f"unparseable value: {problem}",
                    cached=True,
                )
            )
        problems += [
            Problem(", ".join(Path(p).name for p in self.results), None, i, f"no result for document {i}")
            for i in sorted(missing)
        ]
        self._report(problems, results, len(set(ids)))
        return results

    def _report(self, problems: list[Problem], results: list[ScreenResult], distinct: int) -> None:
        self.problems = problems
        kinds: dict[str, int] = defaultdict(int)
        for p in problems:
            kinds[p.kind] += 1
        failed = sum(r.error is not None for r in results)
        self.last_stats = {
            "screen.rows": len(results),
            "screen.documents": distinct,
            "screen.failed_rows": failed,
            "screen.failure_rate": failed / max(len(results), 1),
            **{
                f"screen.file_{k}": float(kinds.get(k, 0))
                for k in ("missing", "unknown_id", "duplicate_id", "empty_id", "unparseable")
            },
        }
        if problems:
            self.dir.mkdir(parents=True, exist_ok=True)
            pd.DataFrame([vars(p) for p in problems]).to_csv(self.dir / REPORT, index=False)
            shown = "\n  ".join(p.line() for p in problems[:20])
            more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
            message = (
                f"screener=file: {len(problems)} problems in the results (all in {self.dir / REPORT}):\n  {shown}{more}"
            )
            if self.strict:
                raise DataError(message)
            log.warning("%s", message)
        elif (self.dir / REPORT).exists():
            (self.dir / REPORT).unlink()  # a clean import leaves no stale report behind

    def plan(self, jobs: Mapping[str, Job], documents: Sequence[Document], outcome: Outcome) -> CallPlan:
        """Distinct documents the tool has not answered yet (no sheet read, nothing paid)."""
        keys = {self._key(document_id(d)) for d in documents}
        return CallPlan(calls=len(keys) - len(self.cache.get_many(keys)))

    def metrics(self) -> dict[str, float]:
        return dict(self.last_stats)

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "display_name": self.display_name,
            "kind": "results file",
            "results": [Path(p).name for p in self.results],
            "columns": dict(self.columns),
            "labels": dict(self.values.labels),
            "range": list(self.values.range),
            "callback_threshold": self.values.callback_threshold,
        }
