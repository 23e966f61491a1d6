"""Chat prompts for screeners that ask a model: one system + user template per outcome kind.

The texts live in conf/prompts/{score,callback}.yaml and reach a screener's config through its
Hydra defaults list (`screener.prompts.score`, `screener.prompts.callback`), so they are logged
with every run and overridable from the command line."""
from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Any, Mapping

from popfair.errors import require
from popfair.types import Document, Job, Outcome

OUTCOMES: tuple[Outcome, ...] = ("score", "callback")
FIELDS = ("job_title", "job_description", "document")  # placeholders a user template may use


@dataclass(frozen=True)
class PromptTemplate:
    """A system instruction and a user-message template with {job_title}, {job_description},
    {document} placeholders."""

    system: str
    user: str

    def messages(self, job: Job, document: Document) -> list[dict[str, str]]:
        """The chat messages for one (job, document) pair, in the OpenAI/transformers format."""
        user = self.user.format(job_title=job.title, job_description=job.description,
                                document=document.text)
        return [{"role": "system", "content": self.system}, {"role": "user", "content": user}]


def prompt_templates(prompts: Mapping[str, Any] | None,
                     key: str = "screener.prompts") -> dict[Outcome, PromptTemplate]:
    """Validate `{score: {system, user}, callback: {system, user}}` into templates.

    Raises ConfigError naming the key when an outcome, a field or the {document} placeholder is
    missing, or the user template has an unknown placeholder or unbalanced braces."""
    require(isinstance(prompts, Mapping), key,
            f"must map each outcome {list(OUTCOMES)} to {{system, user}}, got {prompts!r}")
    templates: dict[Outcome, PromptTemplate] = {}
    for outcome in OUTCOMES:
        node = prompts.get(outcome)
        require(isinstance(node, Mapping), f"{key}.{outcome}",
                "missing; give {system: ..., user: ...} (see conf/prompts/)")
        for part in ("system", "user"):
            require(isinstance(node.get(part), str) and node.get(part).strip() != "",
                    f"{key}.{outcome}.{part}", "must be a non-empty string")
        try:
            names = {name for _, name, _, _ in string.Formatter().parse(node["user"]) if name is not None}
        except ValueError as exc:
            require(False, f"{key}.{outcome}.user", f"bad template ({exc}); write {{{{ and }}}} for literal braces")
        unknown = sorted(names - set(FIELDS))
        require(not unknown, f"{key}.{outcome}.user",
                f"unknown placeholder(s) {unknown}; allowed: {list(FIELDS)}")
        require("document" in names, f"{key}.{outcome}.user",
                "must contain the {document} placeholder (the applicant's resume or profile)")
        templates[outcome] = PromptTemplate(system=node["system"], user=node["user"])
    return templates
