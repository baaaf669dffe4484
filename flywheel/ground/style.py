"""Style features of an answer: its length and its markdown, as Chatbot Arena's ``conv_metadata``
counts them.

Judges (human and LLM) prefer longer, more formatted answers. Style control explains part of a
verdict by these features instead of by the models (``flywheel.maths.style_control``), and
curation can refuse wins that style alone explains (``curate.style_control``). The features are
a pure function of the answer's text, so a battle log needs no extra column: they are computed
when a log is rated or exported, and logs in Chatbot Arena's layout bring their own.

- ``tokens``: words and punctuation marks (``\\w+`` runs and single other characters): a
  tokenizer-free stand-in for a BPE count, which runs about 1.3 of these per word of English.
- ``headers``: markdown headers (``#`` to ``######`` then a space, at a line start).
- ``lists``: list items, ordered (``1. ``) and unordered (``- ``, ``* ``, ``+ ``).
- ``bold``: ``**bold**`` and ``__bold__`` spans.

Fenced code blocks are removed before the markdown counts (a ``#`` comment in code is not a
header); they count toward ``tokens``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_TOKEN = re.compile(r"\w+|[^\w\s]")
_CODE = re.compile(r"```.*?```", re.DOTALL)
_HEADER = {f"h{n}": re.compile(rf"^#{{{n}}}\s", re.MULTILINE) for n in range(1, 7)}
_ORDERED = re.compile(r"^\s*\d+\.\s", re.MULTILINE)
_UNORDERED = re.compile(r"^\s*[-*+]\s", re.MULTILINE)
_BOLD_STAR = re.compile(r"\*\*[^*\n]+\*\*")
_BOLD_UNDER = re.compile(r"__[^_\n]+__")

# The order of the features everywhere (a style vector, the style coefficients).
FEATURES: tuple[str, ...] = ("tokens", "headers", "lists", "bold")


@dataclass(frozen=True)
class Style:
    """One answer's style counts, with the breakdown Chatbot Arena's metadata keeps."""

    tokens: int
    headers: dict[str, int]
    lists: dict[str, int]
    bold: dict[str, int]

    def vector(self) -> tuple[int, int, int, int]:
        """(tokens, headers, lists, bold): the totals, in ``FEATURES`` order."""
        return self.tokens, sum(self.headers.values()), sum(self.lists.values()), sum(self.bold.values())


def style_of(text: str) -> Style:
    """The style counts of one answer."""
    text = text or ""
    prose = _CODE.sub("", text)
    return Style(
        tokens=len(_TOKEN.findall(text)),
        headers={h: len(p.findall(prose)) for h, p in _HEADER.items()},
        lists={"ordered": len(_ORDERED.findall(prose)), "unordered": len(_UNORDERED.findall(prose))},
        bold={"**": len(_BOLD_STAR.findall(prose)), "__": len(_BOLD_UNDER.findall(prose))},
    )


def conv_metadata(response_a: str, response_b: str) -> dict:
    """A battle's style features in Chatbot Arena's ``conv_metadata`` layout (single turn)."""
    a, b = style_of(response_a), style_of(response_b)
    out: dict = {"sum_assistant_a_tokens": a.tokens, "sum_assistant_b_tokens": b.tokens}
    for side, s in (("a", a), ("b", b)):
        out[f"header_count_{side}"] = dict(s.headers)
        out[f"list_count_{side}"] = dict(s.lists)
        out[f"bold_count_{side}"] = dict(s.bold)
    return out


def _total(value) -> int:
    return int(sum(value.values())) if isinstance(value, dict) else int(value)


def vectors_from_metadata(meta: dict) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(A's, B's) style vectors in ``FEATURES`` order from a ``conv_metadata`` dict (counts may be
    totals or per-kind dicts, as Chatbot Arena's logs hold them). KeyError names a missing key."""
    def side(s: str) -> tuple[int, ...]:
        return (_total(meta[f"sum_assistant_{s}_tokens"]), _total(meta[f"header_count_{s}"]),
                _total(meta[f"list_count_{s}"]), _total(meta[f"bold_count_{s}"]))

    return side("a"), side("b")
