"""The population audit (PopResume, arXiv 2603.22714): applicants drawn from population microdata
(population=popresume), one resume per prompt, scored 0-100 against the job; path-specific effects
(pse_dml), interventional effects, the outcome gap or impact ratios on the scores.

Reply rules (`SCORE_REPLIES`, config `prompts.score_reply`): `integer`, the first integer of the reply,
0-100 (popfair's rule); `json_decimal`, the number after `"score":` kept to two decimals (85.129 ->
85.12), 0-100, for prompts that ask for `{"score": XX.XX}` as the PopResume authors' do. Anything else
is a recorded parse failure (the raw text is kept and the row is excluded from analysis)."""

from __future__ import annotations

import re
from collections.abc import Mapping

from popfair.core.types import Outcome
from popfair.design.base import OnePromptPerDocument, PowerLine
from popfair.design.population import planning
from popfair.design.sequential import SequentialRules

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_JSON_SCORE = re.compile(r'"score"\s*:\s*"?(-?\d+)(?:\.(\d+))?')
SCORE_REPLIES = ("integer", "json_decimal")


class PopulationDesign(OnePromptPerDocument):
    name = "population"
    outcome: Outcome = "score"
    prompt_files: Mapping[str, str] = {"system": "score_system.txt", "user": "score_user.txt"}
    power_line: PowerLine | None = staticmethod(planning.population_power)
    power_imports: tuple[str, ...] = planning.POWER_IMPORTS
    sequential: SequentialRules | None = planning.PopulationLooks()

    def parse_reply(self, raw: str) -> tuple[float | None, str | None]:
        match = _NUMBER.search(raw)
        if match is None:
            return None, "unparseable answer: no integer in the reply"
        token = match.group(0)
        if "." in token or token.startswith("-"):
            return None, f"unparseable answer: first number {token} is not an integer in 0-100"
        value = int(token)
        if value > 100:
            return None, f"unparseable answer: first integer {value} is outside 0-100"
        return float(value), None


def parse_json_score(raw: str) -> tuple[float | None, str | None]:
    """`{"score": XX.XX}` anywhere in the reply: the number kept to two decimals (truncated, as the
    authors' two-decimal pattern reads it), 0-100; a reply without it is a failure, never a guess."""
    match = _JSON_SCORE.search(raw)
    if match is None:
        return None, 'unparseable answer: no "score": number in the reply'
    whole, decimals = match.group(1), (match.group(2) or "")[:2]
    value = float(f"{whole}.{decimals or 0}")
    if not 0 <= value <= 100:
        return None, f'unparseable answer: "score" {value:g} is outside 0-100'
    return value, None


DESIGN = PopulationDesign()
