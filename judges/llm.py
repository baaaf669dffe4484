"""An LLM judge: any player of the registry, a prompt template, strict verdict parsing.

- The template (``judges/templates/<name>.txt`` or a file path) gets ``{question}``,
  ``{answer_a}``, ``{answer_b}`` and ``{fence}``. The fence is a random token per battle that the
  responses cannot know, so an answer containing "[[A>>B]]" or "ignore the instructions" stays
  inside its block; and only the judge's *last* verdict line counts.
- Both orders: each battle is judged as (A, B) and as (B, A); consistent verdicts count, an
  inconsistent pair becomes a tie (``inconsistent = "tie"``) or is dropped (``"invalid"``).
- Unparseable output is asked again (``max_parse_retries``) and then recorded as invalid: it
  is never counted as a win, a loss or a tie. A failed judge call is recorded the same way.
"""

from __future__ import annotations

import re
from pathlib import Path

from flywheel.players.base import Player, SamplingParams
from flywheel.records import Battle, Judgment, Prompt, stable_id
from judges.base import PairwiseJudge

TEMPLATES = Path(__file__).parent / "templates"
VERDICT = re.compile(r"\[\[\s*([AB])\s*(>>|>|=|<|<<)\s*([AB])\s*\]\]")
# Verdict label -> (winner seat, strength); strength 2 = "much better".
LABELS = {"A>>B": ("A", 2), "A>B": ("A", 1), "A=B": (None, 0), "B>A": ("B", 1), "B>>A": ("B", 2),
          "B<<A": ("A", 2), "B<A": ("A", 1), "B=A": (None, 0), "A<B": ("B", 1), "A<<B": ("B", 2)}


def load_template(name: str) -> str:
    path = Path(name) if ("/" in name or name.endswith(".txt")) else TEMPLATES / f"{name}.txt"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in TEMPLATES.glob("*.txt")))
        raise ValueError(f"judge template {name!r} not found (built in: {known})")
    text = path.read_text(encoding="utf-8")
    for field in ("{question}", "{answer_a}", "{answer_b}"):
        if field not in text:
            raise ValueError(f"judge template {path} lacks {field}")
    return text


def parse_verdict(text: str) -> tuple[str | None, int] | None:
    """(winning seat 'A'/'B' or None for a tie, strength) from the last verdict in ``text``."""
    found = VERDICT.findall(text)
    if not found:
        return None
    a, op, b = found[-1]
    if a == b:
        return None
    return LABELS.get(f"{a}{op}{b}")


class LLMJudge(PairwiseJudge):
    def __init__(self, player: Player, template: str = "arena_hard", both_orders: bool = True,
                 inconsistent: str = "tie", max_parse_retries: int = 1, max_new_tokens: int = 512) -> None:
        self.player = player
        self.template_name = template
        self.template = load_template(template)
        self.both_orders = both_orders
        self.inconsistent = inconsistent
        self.max_parse_retries = max_parse_retries
        self.params = SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0)
        self.name = f"llm:{player.name}:{template}"

    def render(self, b: Battle, swap: bool, attempt: int = 0) -> Prompt:
        first, second = (b.response_b, b.response_a) if swap else (b.response_a, b.response_b)
        fence = "#" * 3 + "-" + stable_id(b.battle_id, swap, attempt, "fence", length=12)
        text = self.template.format(question=b.prompt, answer_a=first, answer_b=second, fence=fence)
        return Prompt(stable_id(self.name, b.battle_id, swap, attempt), text, b.category, b.level, None, "judge")

    def _ask(self, battles: list[Battle], swap: bool) -> dict[str, tuple[tuple[str | None, int] | None, str, str | None]]:
        """battle id -> (parsed verdict in the battle's own seats, raw output, error)."""
        out: dict[str, tuple] = {}
        todo = list(battles)
        for attempt in range(self.max_parse_retries + 1):
            if not todo:
                break
            gens = self.player.generate([self.render(b, swap, attempt) for b in todo], self.params)
            retry = []
            for b, g in zip(todo, gens):
                if not g.ok:
                    out[b.battle_id] = (None, "", f"judge call failed: {g.error}")
                    continue
                v = parse_verdict(g.text)
                if v is None:
                    out[b.battle_id] = (None, g.text, "unparseable verdict")
                    retry.append(b)
                    continue
                seat, strength = v
                if swap and seat is not None:
                    seat = "B" if seat == "A" else "A"
                out[b.battle_id] = ((seat, strength), g.text, None)
            todo = retry
        return out

    def judge(self, battles: list[Battle]) -> list[Judgment]:
        first = self._ask(battles, swap=False)
        second = self._ask(battles, swap=True) if self.both_orders else {}
        out = []
        for b in battles:
            v1, raw1, err1 = first[b.battle_id]
            v2, raw2, err2 = second.get(b.battle_id, (v1, "", None)) if self.both_orders else (v1, "", None)
            raw = raw1 if not self.both_orders else f"[A,B] {raw1}\n[B,A] {raw2}"
            error = err1 or err2
            if error or v1 is None or v2 is None:
                out.append(Judgment(b.battle_id, self.name, None, 0.0, raw=raw, error=error or "no verdict"))
                continue
            if v1[0] != v2[0]:
                if self.inconsistent == "invalid":
                    out.append(Judgment(b.battle_id, self.name, None, 0.0, raw=raw, error="inconsistent across orders"))
                else:
                    out.append(Judgment(b.battle_id, self.name, "tie", 0.0, raw=raw, error=None))
                continue
            seat = v1[0]
            winner = "tie" if seat is None else ("model_a" if seat == "A" else "model_b")
            out.append(Judgment(b.battle_id, self.name, winner, (v1[1] + v2[1]) / 2, raw=raw))
        return out
