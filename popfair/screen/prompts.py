"""Prompt files (conf/prompts/*.txt) and the provider-neutral chat prompt built from them.

Each outcome has a system prompt and a user template. The user template may use the placeholders
{job_title}, {job_description} and {document}; {document} is required. For image documents
{document} becomes IMAGE_PLACEHOLDER and the PNG travels as an image part of the same message.

A relative file name is read from `directory` (config `prompts.dir`) when that folder has it, else
from conf/prompts/: a folder holding only the score prompts (e.g. a replication's own wording)
leaves the other designs' prompts as they ship."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from popfair.core.errors import ConfigError, DataError, require
from popfair.core.types import Document, Job, Outcome
from popfair.design import prompt_defaults
from popfair.runtime.paths import CONF_DIR

PROMPT_DIR = CONF_DIR / "prompts"
CONTEXT_DIR = CONF_DIR / "context"  # config group `context`: texts a screener works in (company, anti-bias)
DEFAULT_PROMPTS = prompt_defaults()  # each design names the files of its question (popfair.design)
IMAGE_PLACEHOLDER = "(The resume is attached as an image.)"


@dataclass(frozen=True)
class ChatPrompt:
    """What one screening call asks: a system prompt, one user message, optionally a PNG image."""

    system: str
    user: str
    image_png: bytes | None = None


def _path(value: str, directory: Path | None) -> Path:
    path = Path(value).expanduser()
    if path.is_absolute():
        return path
    if directory is not None and (directory / path).is_file():
        return directory / path
    return PROMPT_DIR / path


def _read(key: str, value: str, directory: Path | None = None) -> str:
    path = _path(value, directory)
    if not path.is_file():
        where = f"{directory}, then {PROMPT_DIR}" if directory is not None else str(PROMPT_DIR)
        raise ConfigError(
            f"screener.prompts.{key}: prompt file {path} does not exist (relative names are looked up in {where})"
        )
    text = path.read_text(encoding="utf-8").strip()
    require(bool(text), f"screener.prompts.{key}", f"prompt file {path} is empty")
    return text


class PromptSet:
    """The prompt texts of every design's question, read and checked once at construction."""

    def __init__(
        self,
        files: Mapping[str, str] | None = None,
        directory: str | Path | None = None,
        context: Sequence[str] | None = None,
    ) -> None:
        chosen = {**DEFAULT_PROMPTS, **dict(files or {})}
        unknown = set(chosen) - set(DEFAULT_PROMPTS)
        require(
            not unknown,
            "screener.prompts",
            f"unknown prompt keys {sorted(unknown)}; allowed: {sorted(DEFAULT_PROMPTS)}",
        )
        folder = None if directory is None else Path(directory).expanduser()
        if folder is not None and not folder.is_absolute() and not folder.is_dir() and (PROMPT_DIR / folder).is_dir():
            folder = PROMPT_DIR / folder  # a folder shipped under conf/prompts/ (json_score)
        require(folder is None or folder.is_dir(), "prompts.dir", f"{directory} is not a folder")
        # the keys read from prompts.dir (the others from conf/prompts/)
        self.from_dir = (
            []
            if folder is None
            else [k for k, v in chosen.items() if not Path(str(v)).is_absolute() and (folder / str(v)).is_file()]
        )
        require(
            folder is None or bool(self.from_dir),
            "prompts.dir",
            f"{folder} holds none of the prompt files {sorted(set(map(str, chosen.values())))}",
        )
        self.texts = {key: _read(key, str(value), folder) for key, value in chosen.items()}
        for outcome in {key.rpartition("_")[0] for key in DEFAULT_PROMPTS}:
            require(
                self.texts[f"{outcome}_user"].count("{document}") == 1,
                f"screener.prompts.{outcome}_user",
                "the user template must contain the {document} placeholder exactly once",
            )
        # config group `context`: texts after the system prompt, before the job (shared part first)
        self.context = "\n\n".join(_read_context(str(name)) for name in (context or []))
        self._frames: dict[tuple[str, str, str, str], tuple[str, str]] = {}
        # two sets with the same texts build the same prompts
        self.fingerprint = (*sorted(self.texts.items()), ("context", self.context))

    def build(self, outcome: Outcome, job: Job, document: Document) -> ChatPrompt:
        """The chat prompt for one document (placeholders replaced literally, no str.format)."""
        is_image = document.kind == "image"
        return ChatPrompt(
            system=self.system(outcome),
            user=self.users(outcome, {job.job_id: job}, [document])[0],
            image_png=document.image_png if is_image else None,
        )

    def system(self, outcome: Outcome) -> str:
        system = self.texts[f"{outcome}_system"]
        return f"{system}\n\n{self.context}" if self.context else system

    def users(self, outcome: Outcome, jobs: Mapping[str, Job], documents: Sequence[Document]) -> list[str]:
        """The user message of every document, in bulk (a cached rerun of 60,000 rows builds only
        these and the keys, no prompt objects)."""
        frames = {job_id: self.frame(outcome, job) for job_id, job in jobs.items()}
        users = []
        for document in documents:
            head, tail = frames[document.job_id]
            users.append(head + (IMAGE_PLACEHOLDER if document.kind == "image" else document.text) + tail)
        return users

    def frame(self, outcome: Outcome, job: Job) -> tuple[str, str]:
        """The user template with the job filled in, split around {document} (memoised per job:
        60,000 resumes for one job share it)."""
        memo_key = (outcome, job.job_id, job.title, job.description)
        frame = self._frames.get(memo_key)
        if frame is None:
            filled = (
                self.texts[f"{outcome}_user"]
                .replace("{job_title}", job.title)
                .replace("{job_description}", job.description)
            )
            head, _, tail = filled.partition("{document}")
            frame = self._frames[memo_key] = (head, tail)
        return frame


def _read_context(name: str) -> str:
    """One context text (config `context.files`): an absolute path, or a file under conf/context/."""
    path = Path(name).expanduser()
    path = path if path.is_absolute() else CONTEXT_DIR / path
    require(
        path.is_file(), "context.files", f"context file {path} does not exist (relative names are in {CONTEXT_DIR})"
    )
    text = path.read_text(encoding="utf-8").strip()
    require(bool(text), "context.files", f"context file {path} is empty")
    return text


class PromptUsers(Sequence[str]):
    """The user messages of a prompt table's distinct prompts, each built when it is read (its job's
    template around the document): a plan counts prompts and characters without them, so a sweep's
    tables do not hold a second copy of every resume. `parts`: per template, the text before and
    after {document} and the documents' texts."""

    def __init__(self, parts: Sequence[tuple[str, str, list[str]]]) -> None:
        self._parts = parts
        self._ends = np.cumsum([len(texts) for _, _, texts in parts], dtype=np.int64)

    def __len__(self) -> int:
        return int(self._ends[-1]) if len(self._ends) else 0

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if not -len(self) <= index < len(self):
            raise IndexError(index)
        index %= len(self)
        group = int(np.searchsorted(self._ends, index, side="right"))
        head, tail, texts = self._parts[group]
        return head + texts[index - (int(self._ends[group - 1]) if group else 0)] + tail

    def __iter__(self) -> Iterator[str]:
        return (head + text + tail for head, tail, texts in self._parts for text in texts)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and len(self) == len(other) and all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True)
class PromptTable:
    """The distinct prompts of one document list under one prompt set and outcome (identical
    prompts are one call): their user texts (built when read, `PromptUsers`), images and user-text
    lengths, for planning. A prompt is its job's filled template (the text before and after
    {document}) and its document (its text, or the image placeholder and the PNG).

    Built once per process for a given document list and job texts, and memoised by the list's
    identity (the memo holds the list, so an identity is never reused while its entry lives) and
    the job map's identity or, failing that, its texts: the cases of a sweep plan the same
    documents for many models, and the gender and race cases of an occupation the same documents
    for equal jobs. Short lists are not memoised (cheap to build; they would push out the long
    ones). Document lists are not mutated once rendered."""

    users: PromptUsers
    images: list[bytes | None]
    user_chars: np.ndarray
    has_images: bool

    @classmethod
    def of(
        cls, prompts: PromptSet, outcome: Outcome, jobs: Mapping[str, Job], documents: Sequence[Document]
    ) -> PromptTable:
        memoised = len(documents) >= _PROMPT_TABLE_MIN_DOCUMENTS
        key = (id(documents), outcome, prompts.fingerprint)
        hit = _PROMPT_TABLES.get(key) if memoised else None
        if hit is not None and hit[0] is documents and (hit[1] is jobs or hit[2] == _job_texts(jobs)):
            _PROMPT_TABLES.move_to_end(key)
            return hit[3]
        missing_jobs = sorted({d.job_id for d in documents} - set(jobs))
        if missing_jobs:
            raise DataError(f"documents refer to jobs that do not exist: {missing_jobs[:5]}")
        # per job template (equal templates one group): its distinct documents, by text (a document's
        # string hashes once) or placeholder and PNG; no user message is joined to tell two apart
        groups: dict[tuple[str, str], dict[Any, None]] = {}
        group_of = {job_id: groups.setdefault(prompts.frame(outcome, job), {}) for job_id, job in jobs.items()}
        for d in documents:
            if d.kind != "image":
                body: Any = d.text
            elif d.image_png is None:  # no page: the placeholder's text, as a text document of that text
                body = IMAGE_PLACEHOLDER
            else:
                body = (IMAGE_PLACEHOLDER, d.image_png)
            group_of[d.job_id][body] = None
        parts: list[tuple[str, str, list[str]]] = []
        images: list[bytes | None] = []
        chars, has_images = [], False
        for (head, tail), group in groups.items():
            bodies = list(group)
            if all(isinstance(body, str) for body in bodies):  # text documents: no image
                texts, pages = bodies, [None] * len(bodies)
            else:
                texts = [body if isinstance(body, str) else body[0] for body in bodies]
                pages = [None if isinstance(body, str) else body[1] for body in bodies]
                has_images = True
            parts.append((head, tail, texts))
            images += pages
            chars.append(np.fromiter(map(len, texts), dtype=np.int64, count=len(texts)) + len(head) + len(tail))
        table = cls(
            users=PromptUsers(parts),
            images=images,
            user_chars=np.concatenate(chars) if chars else np.zeros(0, dtype=np.int64),
            has_images=has_images,
        )
        if memoised:
            _PROMPT_TABLES[key] = (documents, jobs, _job_texts(jobs), table)
            while len(_PROMPT_TABLES) > _PROMPT_TABLE_MEMO:
                _PROMPT_TABLES.popitem(last=False)
        return table


_PROMPT_TABLE_MEMO = 16  # tables kept: a sweep plans a few document sets over many models (the paper grid:
# per format, 5 occupations x 2 attributes, whose counterfactual worlds differ, and the 5 race sets' documents
# not already planned for gender: 15 lists a model cycles through; fewer slots rebuilt every table every case)
_PROMPT_TABLE_MIN_DOCUMENTS = 256  # shorter lists are built afresh
_PROMPT_TABLES: OrderedDict[
    tuple[Any, ...], tuple[Sequence[Document], Mapping[str, Job], list[tuple[str, str, str]], PromptTable]
] = OrderedDict()


def _job_texts(jobs: Mapping[str, Job]) -> list[tuple[str, str, str]]:
    """What of a job map the prompts are built from: equal texts, the same prompts."""
    return [(job.job_id, job.title, job.description) for job in jobs.values()]
