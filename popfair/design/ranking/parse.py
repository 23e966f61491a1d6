"""Read a ranking from a model's free-text reply, given the names of the trial's candidates.

Rules, in order (the first that finds a candidate wins):

1. JSON: an array (or an object holding one, e.g. ``{"ranking": [...]}``) of names or of objects
   with a name (sorted by their "rank" field when every item has one); each item counts for the
   first candidate it names.
2. A list: lines that start with a list marker (``1.`` ``1)`` ``(1)`` ``#1`` ``-`` ``*`` ``•``
   ``Rank 1:``), each counting for the first candidate the line names; text outside the list (a
   preamble, reasons) is ignored.
3. Otherwise the order in which the candidates are first named (names in order, one per line or
   "A > B > C", or prose).

Names match without regard to case, accents or middle initials, as "First Last" or "Last, First";
"Candidate 3" (the label the prompt shows) names the third candidate shown. A partial ranking keeps
the ranks it has (the unnamed candidates are `missing`); a reply that names no candidate, or
declines to rank (a refusal) without a list, is a failure with its reason.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Sequence
from functools import lru_cache
from typing import Any, NamedTuple

_SINGLE_LETTER = re.compile(r"(?<![\w'-])[a-z]\.?(?=\s)")  # middle initials (and "a"): never part of a name
_SPACES = re.compile(r"[ \t\u00a0]+")
_LIST_LINE = re.compile(
    r"^[ \t]*[*_]{0,2}[ \t]*(?:[-*\u2022\u00b7]|\(?\d{1,2}[.):\]]|#\d{1,2}|rank[ \t]*\d{1,2}[ \t]*[:.\-)])"
)
_LABEL = re.compile(r"\bcandidate[ \t]*(?:#|no\.?)?[ \t]*(\d{1,2})\b")
_REFUSAL = re.compile(
    r"\b(?:i\s*(?:can ?not|can't|won't|will not|am unable to|am not able to|must decline)|i'm\s*(?:sorry|unable|not able)"
    r"|unable to (?:rank|provide)|not (?:able|comfortable) to rank|decline to rank)"
)
_DASHES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u2010": "-", "\u2011": "-", "\u2013": "-", "\u2014": "-"})


class Ranking(NamedTuple):
    """A parsed reply: `order` holds candidate indices (0-based, as shown) best first; `missing` the
    candidates it does not rank; `method` the rule that read it (json, list, mentions); `error` the
    reason when the reply gives no ranking (then `order` is empty)."""

    order: tuple[int, ...]
    missing: tuple[int, ...]
    method: str
    error: str | None = None


def normalise(text: str) -> str:
    """Lower case, accents and middle initials removed, quotes and dashes plain, runs of spaces single."""
    if not text.isascii():
        text = unicodedata.normalize("NFKD", text.translate(_DASHES))
        text = "".join(ch for ch in text if not unicodedata.combining(ch))
    return _SPACES.sub(" ", _SINGLE_LETTER.sub("", text.lower() + " ")).replace(" \n", "\n")


@lru_cache(maxsize=65536)  # names repeat across trials (drawn from pools)
def name_forms(name: str) -> tuple[str, str]:
    """('first last', 'last, first') of a candidate's name, normalised (middle initials dropped)."""
    words = normalise(name).split()
    if len(words) < 2:
        return (words[0] if words else "", "\0")
    first, last = words[0], words[-1]
    return f"{first} {last}", f"{last}, {first}"


def parse_ranking(raw: str | None, names: Sequence[str]) -> Ranking:
    r"""The ranking a model's reply gives of a trial's candidates (the rules: module docstring).

    Parameters
    ----------
    raw : str or None
        The reply as the model wrote it.
    names : sequence of str
        The candidates' full names, in the order they were shown.

    Returns
    -------
    Ranking
        `order` (candidate indices as shown, best first), `missing` (candidates not ranked),
        `method` (json, list, mentions) and `error` (why there is no ranking, else None).

    Examples
    --------
    >>> from popfair import parse_ranking
    >>> reply = "My ranking:\n1) WEI CHEN - strongest\n2) Maria Garcia, ahead of Ann Lee\n3) Ann Lee"
    >>> parse_ranking(reply, ["Maria L. Garcia", "Ann Lee", "Wei Chen"]).order
    (2, 0, 1)
    >>> parse_ranking("I'm sorry, I can't rank people.", ["Ann Lee", "Wei Chen"]).error[:10]
    'no ranking'
    """
    k = len(names)
    if raw is None or not raw.strip():
        return Ranking((), tuple(range(k)), "none", "no ranking: empty reply")
    text = normalise(raw)
    forms = [name_forms(name) for name in names]
    listed = _exact_list(text, forms)
    if listed is not None:  # the format the prompt asks for: one marked line per name, nothing else marked
        return Ranking(listed, (), "list")
    mentions = _mentions(text, forms)
    order: list[int] = []
    method = "mentions"
    if "[" in text or "{" in text:
        order = _json_order(raw, forms)
        method = "json"
    if not order:
        order = _list_order(text, mentions)
        method = "list"
    if not order:
        if mentions and _REFUSAL.search(raw[:300].translate(_DASHES).lower()):  # before "i" is dropped
            return Ranking((), tuple(range(k)), "mentions", f"no ranking: the reply declines to rank: {raw[:300]!r}")
        order = list(dict.fromkeys(c for _, c in mentions))
        method = "mentions"
    if not order:
        return Ranking((), tuple(range(k)), "none", f"no ranking: the reply names no candidate: {raw[:300]!r}")
    ranked = set(order)
    return Ranking(tuple(order), tuple(c for c in range(k) if c not in ranked), method)


def _exact_list(text: str, forms: Sequence[tuple[str, str]]) -> tuple[int, ...] | None:
    """The order of a reply whose list lines each hold exactly one whole name and name every
    candidate (what rule 2 reads from it, found without searching); None for any other reply."""
    if "[" in text or "{" in text:
        return None
    lookup = {form: candidate for candidate, pair in enumerate(forms) for form in pair}
    order = []
    for line in text.split("\n"):
        marker = _LIST_LINE.match(line)
        if marker is None:
            continue
        candidate = lookup.get(line[marker.end() :].strip(" *_.:\t"))
        if candidate is None or candidate in order:
            return None
        order.append(candidate)
    return tuple(order) if len(order) == len(forms) else None


def _mentions(text: str, forms: Sequence[tuple[str, str]]) -> list[tuple[int, int]]:
    """(position, candidate) of every naming of a candidate in normalised text, in text order."""
    found = []
    for candidate, variants in enumerate(forms):
        for variant in variants:
            start = text.find(variant)
            while start >= 0:
                end = start + len(variant)
                # whole words only: "ann lee" must not match inside "joann leeds"
                if (start == 0 or not text[start - 1].isalpha()) and (end == len(text) or not text[end].isalpha()):
                    found.append((start, candidate))
                start = text.find(variant, end)
    k = len(forms)
    for match in _LABEL.finditer(text):
        shown = int(match.group(1))
        if 1 <= shown <= k:
            found.append((match.start(), shown - 1))
    found.sort()
    return found


def _first_named(text: str, forms: Sequence[tuple[str, str]]) -> int | None:
    mentions = _mentions(normalise(text), forms)
    return mentions[0][1] if mentions else None


def _list_order(text: str, mentions: list[tuple[int, int]]) -> list[int]:
    """The first candidate named on each list line, in line order."""
    if not mentions:
        return []
    order: list[int] = []
    position, i = 0, 0
    for line in text.split("\n"):
        end = position + len(line)
        while i < len(mentions) and mentions[i][0] < position:
            i += 1
        if _LIST_LINE.match(line) and i < len(mentions) and mentions[i][0] < end:
            candidate = mentions[i][1]
            if candidate not in order:
                order.append(candidate)
        position = end + 1
    return order


def _json_order(raw: str, forms: Sequence[tuple[str, str]]) -> list[int]:
    """The order of a JSON array of names (or of objects naming one) found in the reply."""
    value = _json_value(raw)
    if isinstance(value, dict):
        value = next((v for v in value.values() if isinstance(v, list)), None)
    if not isinstance(value, list):
        return []
    items: list[Any] = value
    if items and all(isinstance(item, dict) and isinstance(item.get("rank"), (int, float)) for item in items):
        items = sorted(items, key=lambda item: item["rank"])
    order: list[int] = []
    for item in items:
        text = " ".join(str(v) for v in item.values()) if isinstance(item, dict) else str(item)
        candidate = _first_named(text, forms)
        if candidate is not None and candidate not in order:
            order.append(candidate)
    return order


def _json_value(raw: str) -> Any:
    """The first JSON array or object in the reply (a ```json fence or bare), or None."""
    for opener, closer in (("[", "]"), ("{", "}")):
        start, end = raw.find(opener), raw.rfind(closer)
        if 0 <= start < end:
            try:
                return json.loads(raw[start : end + 1])
            except ValueError:
                continue
    return None
