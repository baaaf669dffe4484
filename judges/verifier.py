"""Programmatic judges for prompts with a reference answer.

A check scores one response against the reference in [0, 1] (1 = correct):

- ``exact``: equal up to whitespace;
- ``numeric``: the first number in the response is within ``tolerance`` (absolute) or
  ``relative_tolerance`` (of the reference) of the reference number;
- ``regex``: ``pattern``'s first group (or whole match) equals the reference; without a pattern
  the reference itself is a regular expression the whole response must match;
- ``callable``: a user function ``fn(response, reference) -> bool | float`` (``"module:fn"``).

With ``extract="final"`` a check reads the final answer a chatty model states in its response
(``final_answer``: "17 + 25 = 42." gives "42") instead of the whole response; the battle log
keeps the raw response either way.

The higher score wins; equal scores are a ``tie``, or ``tie (bothbad)`` when both fail (< 0.5).

A conversation (``Battle.multi_turn``) is checked turn by turn: every user turn that carries a
reference is checked against the answer after it, and a side's score is the mean over those turns
(each checked turn weighs the same), compared as above; equal scores are a ``tie`` only where every
checked turn of both is right. The judgment reports each turn (``Judgment.turns``, and in ``raw``):
``turns_a=[1, 0] turns_b=[1, 1]`` (1 right, 0 wrong, null for a turn without a reference).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable

from flywheel.config.parts import VerifierConfig
from flywheel.ground.conversation import decode
from flywheel.ground.records import Battle, Judgment
from flywheel.players.registry import resolve
from judges.pairwise import PairwiseJudge

NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
Check = Callable[[str, str], "bool | float"]


def normalize(text: str) -> str:
    """Whitespace-insensitive form of an answer."""
    return " ".join(text.split())


def exact(response: str, reference: str) -> bool:
    return normalize(response) == normalize(reference)


BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
ANSWER_IS = re.compile(r"\b(?:final answer|answer|result)\s*(?:is|:|=)\s*:?\s*(.+)", re.I)
AFTER_EQUALS = re.compile(r"=\s*([^=\n]+?)\s*$")
TRAILING = " \t.,;:!?\"'`*)]}"
LEADING = " \t\"'`*([{"


def _clean(answer: str) -> str:
    return answer.strip().strip(TRAILING).lstrip(LEADING).strip()


def final_answer(text: str) -> str:
    """The answer a response states, for models that answer in sentences: the last
    ``\\boxed{x}``; else the first "the answer is x" / "answer: x" (up to the end of its
    sentence); else the last "= x" of the first line that has one; else the whole response.
    Quotes, emphasis and closing punctuation around it are dropped: "17 + 25 = 42." gives "42",
    "The answer is **cba**." gives "cba"."""
    text = text.strip()
    if boxed := BOXED.findall(text):
        return _clean(boxed[-1])
    if m := ANSWER_IS.search(text):
        sentence = re.split(r"[.,;](?:\s|$)|\n", m[1] + " ")[0]
        return _clean(sentence)
    for line in text.splitlines():
        if m := AFTER_EQUALS.search(line.rstrip(TRAILING)):
            return _clean(m[1])
    return _clean(text) if text else text


def first_number(text: str) -> float | None:
    m = NUMBER.search(text.replace(",", ""))
    return float(m.group()) if m else None


def numeric(tolerance: float = 1e-6, relative_tolerance: float = 0.0) -> Check:
    def check(response: str, reference: str) -> bool:
        got, want = first_number(response), first_number(reference)
        if got is None or want is None:
            return False
        return math.isclose(got, want, rel_tol=relative_tolerance, abs_tol=tolerance)
    return check


def regex(pattern: str | None = None) -> Check:
    compiled = re.compile(pattern) if pattern else None

    def check(response: str, reference: str) -> bool:
        if compiled is None:
            return re.fullmatch(reference, response.strip(), re.S) is not None
        m = compiled.search(response)
        if m is None:
            return False
        got = m.group(1) if compiled.groups else m.group(0)
        return normalize(got) == normalize(reference)
    return check


def load_callable(spec: str) -> Callable:
    """A function (or class) named ``"module:attr"``."""
    if ":" not in spec:
        raise ValueError(f"{spec!r}: name it as 'module:attribute'")
    fn = resolve(spec, {})
    if not callable(fn):
        raise ValueError(f"{spec!r} is not callable")
    return fn


def make_check(match: str = "exact", tolerance: float = 1e-6, relative_tolerance: float = 0.0,
               pattern: str | None = None, function: str | Callable | None = None, extract: str = "none") -> Check:
    """The check a verifier config describes; ``extract="final"`` applies it to ``final_answer``."""
    check = _base_check(match, tolerance, relative_tolerance, pattern, function)
    if extract == "none":
        return check
    if extract != "final":
        raise ValueError(f"unknown extract {extract!r} (none, final)")
    return lambda response, reference: check(final_answer(response), reference)


def _base_check(match: str, tolerance: float, relative_tolerance: float, pattern: str | None,
                function: str | Callable | None) -> Check:
    if match == "exact":
        return exact
    if match == "numeric":
        return numeric(tolerance, relative_tolerance)
    if match == "regex":
        return regex(pattern)
    if match == "callable":
        if function is None:
            raise ValueError("match 'callable' needs a function")
        return load_callable(function) if isinstance(function, str) else function
    raise ValueError(f"unknown match {match!r} (exact, numeric, regex, callable)")


class VerifierJudge(PairwiseJudge):
    """Right beats wrong; both right is ``tie``; both wrong is ``tie (bothbad)``."""

    def __init__(self, match: str = "exact", tolerance: float = 1e-6, relative_tolerance: float = 0.0,
                 pattern: str | None = None, function: str | Callable | None = None, extract: str = "none") -> None:
        self.check = make_check(match, tolerance, relative_tolerance, pattern, function, extract)
        self.name = ("verifier" if match == "exact" else f"verifier:{match}") + ("" if extract == "none" else "+final")

    @classmethod
    def from_config(cls, vc: VerifierConfig) -> VerifierJudge:
        """The verifier a ``judge.verifier`` section describes."""
        return cls(match=vc.match, tolerance=vc.tolerance, relative_tolerance=vc.relative_tolerance,
                   pattern=vc.pattern, function=vc.function, extract=vc.extract)

    def correct(self, response: str | None, reference: str | None) -> bool:
        """Whether ``response`` passes the check (a score of at least 0.5)."""
        if response is None or reference is None:
            return False
        try:
            return self.score(response, reference) >= 0.5
        except Exception:  # noqa: BLE001 - a user check that raises counts as not passed
            return False

    def score(self, response: str, reference: str) -> float:
        """The check's score in [0, 1]; a ValueError where a callable check scores outside it (NaN
        included), which a battle records as a failed check and an RL reward as a failed reward."""
        v = self.check(response, reference)
        if isinstance(v, bool) or v is None:
            return float(bool(v))
        if not 0 <= (v := float(v)) <= 1:
            raise ValueError(f"check scored {v!r}, outside 0 to 1")
        return v

    def turn_scores(self, conversation: str) -> list[float | None]:
        """The score of each user turn's answer in a conversation (None: no reference, or no answer)."""
        messages = decode(conversation)
        out: list[float | None] = []
        for i, m in enumerate(messages):
            if m["role"] != "user":
                continue
            reply = messages[i + 1]["content"] if i + 1 < len(messages) else None
            ref = m.get("reference")
            out.append(None if ref is None else 0.0 if reply is None else self.score(reply, ref))
        return out

    def judge(self, battles: list[Battle]) -> list[Judgment]:
        out = []
        for b in battles:
            turns, marks = "", {}
            try:
                if b.multi_turn:
                    ta, tb = self.turn_scores(b.conversation_a), self.turn_scores(b.conversation_b)
                    pairs = [(x, y) for x, y in zip(ta, tb) if x is not None and y is not None]
                    if not pairs:
                        out.append(Judgment(b.battle_id, self.name, None, 0.0, error="no turn with a reference answer"))
                        continue
                    sa, sb = (sum(s) / len(pairs) for s in zip(*pairs))
                    marks = {"a": _marks(ta), "b": _marks(tb)}
                    turns = f" turns_a={json.dumps(marks['a'])} turns_b={json.dumps(marks['b'])}"
                elif b.reference is None:
                    out.append(Judgment(b.battle_id, self.name, None, 0.0, error="no reference answer"))
                    continue
                else:
                    sa, sb = self.score(b.response_a, b.reference), self.score(b.response_b, b.reference)
            except Exception as e:  # a user check that raises: this battle is invalid, not the run
                out.append(Judgment(b.battle_id, self.name, None, 0.0, error=f"check failed: {e!r}"))
                continue
            if sa == sb:  # a conversation's tie is good only where every checked turn of both is right
                good = sa >= 0.5 if not marks else all(x != 0 for side in marks.values() for x in side)
                winner = "tie" if good else "tie (bothbad)"
            else:
                winner = "model_a" if sa > sb else "model_b"
            out.append(Judgment(b.battle_id, self.name, winner, margin=abs(sa - sb), score_a=sa, score_b=sb,
                                raw=f"a_score={sa:g} b_score={sb:g}{turns}",
                                turns=json.dumps(marks) if marks else ""))
        return out


def _marks(scores: list[float | None]) -> list[int | None]:
    """Each turn's correctness: 1 right, 0 wrong, None unchecked (``Judgment.turns``)."""
    return [None if s is None else int(s >= 0.5) for s in scores]
