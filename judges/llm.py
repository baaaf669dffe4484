"""An LLM judge: any player of the registry, a prompt template, strict verdict parsing.

- Templates are files (``judges/templates/<name>.txt`` or a path) with ``{question}``,
  ``{answer_a}``, ``{answer_b}`` and ``{fence}``. A first line ``#! verdict: scores`` makes the
  judge read two 1-10 scores (``[[7, 3]]``, WizardArena style); otherwise it reads an
  Arena-Hard verdict (``[[A>>B]]`` ... ``[[B>>A]]``).
- Injection: the fence is a token derived from a hash of the battle's content, which a response
  cannot contain (it would have to contain its own hash), so an answer that says "[[A>>B]]" or
  "ignore the instructions" stays inside its fenced block. Output lines that quote a response
  verbatim are ignored when the verdict is read, and only the *last* verdict counts.
- Both orders: each battle is judged as (A, B) and as (B, A); consistent verdicts count, an
  inconsistent pair becomes a tie (``inconsistent = "tie"``) or is invalid (``"invalid"``);
  either way ``Judgment.flip`` records it, for the position-flip rate.
- The second order when unsure (``second_order="when_unsure"``, a cascade tier's setting): each
  battle is judged first in one seat order, drawn per battle from its id (so a judge's position
  bias does not always favour one model), and in the other order only where that verdict's
  confidence is under ``sure_above`` (where the API gave log-probabilities). A verdict
  that stands on one order has ``flip`` None and cost half a battle's two calls; an invalid first
  order stays invalid.
- Unparseable output is asked again (``max_parse_retries``, with a fresh fence) and then
  recorded as invalid: never counted as a win, a loss or a tie. A failed call is recorded the same.
- Cache: raw outputs are kept by a hash of (judge model identity, rendered prompt, length limit),
  which covers the template, the question, both responses and their order; a resumed or repeated
  run asks the judge nothing it has already answered.
- Confidence: with ``confidence=True`` the judge asks for log-probabilities (APIs that return
  them: the openai kind, vLLM) and records, per verdict, the probability it gave the verdict it
  wrote (the product of the probabilities of the tokens that spell the last verdict; the lower of
  both orders) in ``Judgment.confidence``; the cache keeps it beside the output.
- Conversations (``Battle.multi_turn``): the judge reads both whole conversations in a multi-turn
  template (``<template>_multiturn``, else ``arena_hard_multiturn``: ``{conversation_a}``,
  ``{conversation_b}``, ``{fence}``), every user turn and every answer in its own fenced block, in
  both orders; the rendered prompt, and so the cache key, holds the whole history.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from flywheel.config.parts import JudgeConfig, PlayerConfig
from flywheel.ground.conversation import decode
from flywheel.ground.records import Battle, Judgment, Prompt, stable_id
from flywheel.players.player import Player, SamplingParams
from judges.pairwise import PairwiseJudge

TEMPLATES = Path(__file__).parent / "templates"
VERDICT = re.compile(r"\[\[\s*([AB])\s*(>>|>|=|<|<<)\s*([AB])\s*\]\]")
SCORES = re.compile(r"\[\[\s*(\d+(?:\.\d+)?)\s*,\s*(\d+(?:\.\d+)?)\s*\]\]")
# Verdict label -> (winner seat, strength); strength 2 = "much better".
LABELS = {"A>>B": ("A", 2), "A>B": ("A", 1), "A=B": (None, 0), "B>A": ("B", 1), "B>>A": ("B", 2),
          "B<<A": ("A", 2), "B<A": ("A", 1), "B=A": (None, 0), "A<B": ("B", 1), "A<<B": ("B", 2)}
FORMATS = ("pairwise", "scores")
BOTHBAD_BELOW = 4.0  # scores template: a tie where both score below this is "tie (bothbad)"

# A parsed verdict in some seat order: (winning seat 'A'/'B' or None for a tie, strength, scores).
Verdict = tuple[str | None, int, tuple[float, float] | None]
# One order's answer: (verdict in the battle's own seats, raw output, error, confidence).
Answer = tuple[Verdict | None, str, str | None, float | None]


SINGLE_FIELDS = ("{question}", "{answer_a}", "{answer_b}", "{fence}")
MULTI_FIELDS = ("{conversation_a}", "{conversation_b}", "{fence}")


def load_template(name: str, fields: tuple[str, ...] = SINGLE_FIELDS) -> tuple[str, str]:
    """(template text, verdict format) of a built-in template name or a file path; ``fields``: the
    placeholders it must have (``MULTI_FIELDS`` for a multi-turn template)."""
    path = Path(name) if ("/" in name or name.endswith(".txt")) else TEMPLATES / f"{name}.txt"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in TEMPLATES.glob("*.txt")))
        raise ValueError(f"judge template {name!r} not found (built in: {known})")
    text = path.read_text(encoding="utf-8")
    fmt = "pairwise"
    if text.startswith("#!"):
        head, _, text = text.partition("\n")
        m = re.fullmatch(r"#!\s*verdict:\s*(\w+)\s*", head)
        if not m or m[1] not in FORMATS:
            raise ValueError(f"judge template {path}: first line must be '#! verdict: pairwise|scores'")
        fmt = m[1]
    for field in fields:
        if field not in text:
            raise ValueError(f"judge template {path} lacks {field}")
    return text, fmt


def multi_turn_template(name: str) -> str:
    """The multi-turn template that goes with template ``name``: ``<name>_multiturn`` beside it
    (built in, or a file next to a template file), else the built-in ``arena_hard_multiturn``."""
    path = Path(name) if ("/" in name or name.endswith(".txt")) else TEMPLATES / f"{name}.txt"
    twin = path.with_name(f"{path.stem}_multiturn.txt")
    return str(twin) if twin.is_file() else "arena_hard_multiturn"


def render_conversation(conversation: str, seat: str, fence: str) -> str:
    """One side's conversation for a multi-turn template: every user turn and every answer in its
    own fenced block (``<fence> USER TURN 1`` ... ``<fence> END ASSISTANT A TURN 1``)."""
    blocks, n = [], 0
    for m in decode(conversation):
        if m["role"] == "user":
            n += 1
            who = f"USER TURN {n}"
        elif m["role"] == "assistant":
            who = f"ASSISTANT {seat} TURN {n}"
        else:
            continue
        blocks.append(f"{fence} {who}\n{m['content']}\n{fence} END {who}")
    return "\n\n".join(blocks)


def _unquoted(text: str, quoted: tuple[str, ...]) -> str:
    """``text`` without the lines that repeat a line of a judged response verbatim."""
    seen = {line.strip() for q in quoted for line in q.splitlines() if line.strip()}
    return "\n".join(line for line in text.splitlines() if line.strip() not in seen)


def parse_verdict(text: str, fmt: str = "pairwise", quoted: tuple[str, ...] = ()) -> Verdict | None:
    """The last verdict in ``text`` in the template's format, or None. Lines quoting one of
    ``quoted`` (the responses) are skipped; if that leaves no verdict, the output's last line
    still counts when it is a verdict (a judge whose honest verdict a response happens to repeat)."""
    for candidate in (_unquoted(text, quoted), (text.strip().splitlines() or [""])[-1]):
        v = _parse(candidate, fmt)
        if v is not None:
            return v
    return None


def _parse(text: str, fmt: str) -> Verdict | None:
    if fmt == "scores":
        found = SCORES.findall(text)
        if not found:
            return None
        sa, sb = (float(x) for x in found[-1])
        if not (1 <= sa <= 10 and 1 <= sb <= 10):
            return None
        diff = abs(sa - sb)
        seat = None if diff == 0 else ("A" if sa > sb else "B")
        return seat, (0 if diff == 0 else 2 if diff >= 3 else 1), (sa, sb)
    found = VERDICT.findall(text)
    if not found:
        return None
    a, op, b = found[-1]
    if a == b:
        return None
    seat, strength = LABELS[f"{a}{op}{b}"]
    return seat, strength, None


def verdict_confidence(tokens: tuple[tuple[str, float], ...], fmt: str = "pairwise") -> float | None:
    """The probability the judge gave the last verdict it wrote: exp of the summed log-probabilities
    of the tokens that spell it (``A>B`` inside ``[[...]]``, or both scores); None without tokens
    or without a verdict in them."""
    if not tokens:
        return None
    text = "".join(t for t, _ in tokens)
    found = list((SCORES if fmt == "scores" else VERDICT).finditer(text))
    if not found:
        return None
    m = found[-1]
    start, end = m.start(1), m.end(m.re.groups)
    total, at = 0.0, 0
    for token, logprob in tokens:
        if at < end and at + len(token) > start:
            total += logprob
        at += len(token)
    return math.exp(total)


def _number(text: str | None) -> float | None:
    return float(text) if text is not None else None


def _answers(b: Battle) -> tuple[str, ...]:
    """The texts a judge's output may quote: both responses, or every turn of both conversations."""
    if not b.multi_turn:
        return (b.response_a, b.response_b)
    return tuple(m["content"] for c in (b.conversation_a, b.conversation_b) for m in decode(c))


def _swap(v: Verdict) -> Verdict:
    """A verdict read with the responses swapped, in the battle's own seats."""
    seat, strength, scores = v
    seat = None if seat is None else ("B" if seat == "A" else "A")
    return seat, strength, (scores[1], scores[0]) if scores else None


def first_order_swapped(battle_id: str) -> bool:
    """Whether a battle judged in one order first is asked with its answers swapped: half the
    battles, drawn from the battle's id (the same on resume)."""
    return int(stable_id("first order", battle_id), 16) % 2 == 1


def model_identity(pc: PlayerConfig) -> str:
    """What a judge model's outputs depend on (part of the judgment cache key)."""
    return f"{pc.kind}:{pc.model or pc.path or pc.name}@{','.join(pc.base_urls)}"


class LLMJudge(PairwiseJudge):
    def __init__(self, player: Player, template: str = "arena_hard", both_orders: bool = True,
                 inconsistent: str = "tie", max_parse_retries: int = 1, max_new_tokens: int = 512,
                 cache=None, identity: str | None = None, confidence: bool = False,
                 second_order: str = "always", sure_above: float | None = None) -> None:
        if second_order not in ("always", "when_unsure"):
            raise ValueError(f"second_order: 'always' or 'when_unsure', not {second_order!r}")
        if sure_above is not None and not confidence:
            raise ValueError("sure_above reads the verdict's confidence: it needs confidence=True")
        self.player = player
        self.template_name = Path(template).stem
        self.template, self.format = load_template(template)
        self.multi_template, self.multi_format = load_template(multi_turn_template(template), MULTI_FIELDS)
        self.both_orders = both_orders
        self.when_unsure = both_orders and second_order == "when_unsure"
        self.sure_above = sure_above
        self.inconsistent = inconsistent
        self.max_parse_retries = max_parse_retries
        self.params = SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0, logprobs=confidence)
        self.cache = cache  # a flywheel.ground.store.KeyValueCache, or None
        self.identity = identity or f"{type(player).__name__}:{player.name}"
        self.name = f"llm:{player.name}:{self.template_name}"
        self.model = player.name
        self.calls = 0
        self.cache_hits = 0
        self.judged = 0  # battles given to judge (a hybrid's or a cascade's share)

    @classmethod
    def from_config(cls, jc: JudgeConfig, pc: PlayerConfig, player: Player, *, cache=None,
                    confidence: bool = False, second_order: str = "always",
                    sure_above: float | None = None) -> LLMJudge:
        """The judge a ``judge:`` section ``jc`` describes (template, both orders, inconsistent pairs,
        parse retries), asking ``player``, the model ``pc`` configures (its length limit; its kind,
        model and endpoints name its outputs in ``cache``); ``second_order`` and ``sure_above``: a
        cascade tier's (see the module's docstring)."""
        return cls(player, template=jc.template, both_orders=jc.both_orders, inconsistent=jc.inconsistent,
                   max_parse_retries=jc.max_parse_retries, max_new_tokens=pc.max_new_tokens, cache=cache,
                   identity=model_identity(pc), confidence=confidence, second_order=second_order,
                   sure_above=sure_above)

    def llm_judges(self) -> list[LLMJudge]:
        return [self]

    def render(self, b: Battle, swap: bool, attempt: int = 0) -> Prompt:
        if b.multi_turn:
            return self._render_conversations(b, swap, attempt)
        first, second = (b.response_b, b.response_a) if swap else (b.response_a, b.response_b)
        token = stable_id(self.template, b.prompt, first, second, attempt, "fence", length=12)
        text = self.template.format(question=b.prompt, answer_a=first, answer_b=second, fence=f"###-{token}")
        return Prompt(stable_id(self.name, b.battle_id, swap, attempt), text, b.category, b.level, None, "judge")

    def _render_conversations(self, b: Battle, swap: bool, attempt: int) -> Prompt:
        """Both conversations (in the order ``swap`` says) in the multi-turn template, fenced turn by
        turn with a token of the whole of both: the cache key covers every turn."""
        first, second = (b.conversation_b, b.conversation_a) if swap else (b.conversation_a, b.conversation_b)
        token = stable_id(self.multi_template, first, second, attempt, "fence", length=12)
        fence = f"###-{token}"
        text = self.multi_template.format(conversation_a=render_conversation(first, "A", fence),
                                          conversation_b=render_conversation(second, "B", fence), fence=fence)
        return Prompt(stable_id(self.name, b.battle_id, swap, attempt), text, b.category, b.level, None, "judge")

    def _outputs(self, prompts: list[Prompt], formats: list[str]) -> list[tuple[str | None, str | None, float | None]]:
        """(raw output, error, confidence) per prompt (``formats``: each one's verdict format): from
        the cache, else from the judge model. A judge that asks for confidence finds an output in
        the cache only with its confidence."""
        keys = [stable_id(self.identity, p.text, self.params.max_new_tokens) for p in prompts]
        sure = {k: stable_id(k, "confidence") for k in keys}
        cached = self.cache.get_many(keys + (list(sure.values()) if self.params.logprobs else [])) \
            if self.cache is not None else {}
        out: list[tuple[str | None, str | None, float | None]] = [
            (cached.get(k), None, _number(cached.get(sure[k]))) for k in keys]
        todo = [i for i, k in enumerate(keys) if k not in cached or (self.params.logprobs and sure[k] not in cached)]
        self.cache_hits += len(prompts) - len(todo)
        if todo:
            gens = self.player.generate([prompts[i] for i in todo], self.params)
            self.calls += len(todo)
            fresh = []
            for i, g in zip(todo, gens):
                conf = verdict_confidence(g.token_logprobs, formats[i]) if self.params.logprobs else None
                out[i] = (g.text, None, conf) if g.ok else (None, f"judge call failed: {g.error}", None)
                if g.ok:
                    fresh.append((keys[i], g.text))
                    if conf is not None:
                        fresh.append((sure[keys[i]], repr(conf)))
            if self.cache is not None:
                self.cache.put(fresh)
        return out

    def _ask(self, battles: list[Battle], swap: bool) -> dict[str, Answer]:
        """battle id -> (verdict in the battle's own seats, raw output, error, confidence)."""
        out: dict[str, Answer] = {}
        todo = list(battles)
        for attempt in range(self.max_parse_retries + 1):
            if not todo:
                break
            formats = [self.multi_format if b.multi_turn else self.format for b in todo]
            outputs = self._outputs([self.render(b, swap, attempt) for b in todo], formats)
            retry = []
            for b, fmt, (text, error, conf) in zip(todo, formats, outputs):
                if text is None:
                    out[b.battle_id] = (None, "", error, None)
                    continue
                v = parse_verdict(text, fmt, _answers(b))
                if v is None:
                    out[b.battle_id] = (None, text, "unparseable verdict", None)
                    retry.append(b)
                    continue
                out[b.battle_id] = (_swap(v) if swap else v, text, None, conf)
            todo = retry
        return out

    def judge(self, battles: list[Battle]) -> list[Judgment]:
        return [j for j, _ in self.judge_costed(battles)]

    def judge_costed(self, battles: list[Battle]) -> list[tuple[Judgment, float]]:
        self.judged += len(battles)
        if self.when_unsure:
            return self._judge_when_unsure(battles)
        first = self._ask(battles, swap=False)
        second = self._ask(battles, swap=True) if self.both_orders else {}
        return [(self._combine(b, first[b.battle_id], second.get(b.battle_id)), 1.0) for b in battles]

    def _ask_seated(self, battles: list[Battle], swapped: dict[str, bool]) -> dict[str, Answer]:
        """Each battle asked in its own seat order (``swapped[battle id]``)."""
        out: dict[str, Answer] = {}
        for swap in (False, True):
            group = [b for b in battles if swapped[b.battle_id] == swap]
            if group:
                out.update(self._ask(group, swap))
        return out

    def _sure(self, answer: Answer) -> bool:
        """Whether one order's answer stands alone: invalid (it stays so), or a verdict whose confidence
        reaches ``sure_above`` (where both are known)."""
        verdict, _, _, conf = answer
        return verdict is None or self.sure_above is None or conf is None or conf >= self.sure_above

    def _judge_when_unsure(self, battles: list[Battle]) -> list[tuple[Judgment, float]]:
        """One order per battle (its seats drawn from its id), the other where that one is unsure."""
        swapped = {b.battle_id: first_order_swapped(b.battle_id) for b in battles}
        first = self._ask_seated(battles, swapped)
        again = [b for b in battles if not self._sure(first[b.battle_id])]
        second = self._ask_seated(again, {b.battle_id: not swapped[b.battle_id] for b in again})
        out = []
        for b in battles:
            one, two = first[b.battle_id], second.get(b.battle_id)
            if two is None:
                out.append((self._combine(b, one, None, swapped[b.battle_id]), 0.5))
            else:
                out.append((self._combine(b, *((two, one) if swapped[b.battle_id] else (one, two))), 1.0))
        return out

    def _combine(self, b: Battle, one: Answer, two: Answer | None, swapped: bool = False) -> Judgment:
        """The judgment from the (A,B) order's answer ``one`` and the (B,A) order's ``two``; with one
        order only (``two`` None), ``one`` is that order's, asked swapped where ``swapped``."""
        v1, raw1, err1, c1 = one
        v2, raw2, err2, c2 = two if two is not None else (v1, "", None, c1)
        if two is not None:
            raw = f"[A,B] {raw1}\n[B,A] {raw2}"
        else:
            raw = f"[B,A] {raw1}" if swapped else (f"[A,B] {raw1}" if self.when_unsure else raw1)
        conf = min(c1, c2) if c1 is not None and c2 is not None else None
        if err1 or err2 or v1 is None or v2 is None:
            return Judgment(b.battle_id, self.name, None, 0.0, raw=raw, error=err1 or err2 or "no verdict")
        scores = [v[2] for v in (v1, v2) if v[2] is not None]
        sa = sum(s[0] for s in scores) / len(scores) if scores else None
        sb = sum(s[1] for s in scores) / len(scores) if scores else None
        flip = None if two is None else v1[0] != v2[0]
        if flip:
            if self.inconsistent == "invalid":
                return Judgment(battle_id=b.battle_id, judge=self.name, winner=None, margin=0.0, score_a=sa,
                                score_b=sb, raw=raw, error="inconsistent across orders", flip=True, confidence=conf)
            return Judgment(battle_id=b.battle_id, judge=self.name, winner="tie", margin=0.0, score_a=sa, score_b=sb,
                            raw=raw, flip=True, confidence=conf)
        seat = v1[0]
        if seat is None:
            bad = sa is not None and sb is not None and max(sa, sb) < BOTHBAD_BELOW
            winner = "tie (bothbad)" if bad else "tie"
        else:
            winner = "model_a" if seat == "A" else "model_b"
        return Judgment(battle_id=b.battle_id, judge=self.name, winner=winner, margin=(v1[1] + v2[1]) / 2,
                        score_a=sa, score_b=sb, raw=raw, flip=flip, confidence=conf)
