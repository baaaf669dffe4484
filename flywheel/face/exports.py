"""A run's battles in the layouts other tools read.

- ``arena``: Chatbot Arena's battle log, one row per judged battle: ``model_a``, ``model_b``,
  ``winner`` (``model_a``, ``model_b``, ``tie``, ``tie (bothbad)``), ``judge``, ``category``,
  ``phase``, ``iteration``, ``tstamp``, ``question_id``, ``battle_id``, ``conversation_a``,
  ``conversation_b`` (OpenAI-style turns: every turn of a multi-turn battle), ``turn`` (its user
  turns), ``conv_metadata`` (the answers' style counts in Chatbot
  Arena's layout: ``flywheel.ground.style.conv_metadata``). ``flywheel rate`` (with
  ``--style-control`` too) and Chatbot Arena's notebooks read it. ``tstamp`` is when the battle's
  verdict was written to disk (its judgment shard's modification time, Unix seconds): the log
  records no per-battle clock.
- ``arena-hard``: arena-hard-auto's folders: ``question.jsonl``, ``model_answer/<model>.jsonl``
  (one answer per question: ``question_id``, ``answer_id``, ``model_id``, ``choices``,
  ``tstamp``) and ``model_judgment/<judge>/<model>.jsonl`` (one row per battle of that model:
  ``question_id``, ``model``, ``baseline`` (the other model), ``judge``, ``games``: one game
  with the verdict in arena-hard's labels, the baseline as A, and the judge's raw output).

Only valid verdicts on battles that did not fail are exported: a failed battle or an invalid
verdict never appears as a win, a loss or a tie.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from flywheel.ground.conversation import decode, plain
from flywheel.ground.records import JudgedBattle, stable_id
from flywheel.ground.run_view import RunView
from flywheel.ground.style import conv_metadata

PHASES = ("train", "eval", "all")


def judged_with_times(view: RunView, phase: str = "all") -> list[tuple[JudgedBattle, float]]:
    """Every judged battle of the run (``RunView.judged``: valid verdicts, battles that did not
    fail), in log order, with the time its verdict was written (its judgment shard's mtime)."""
    if phase not in PHASES:
        raise ValueError(f"phase {phase!r}: expected one of {', '.join(PHASES)}")
    when = view.verdict_times()
    return [(jb, when[jb.battle.battle_id]) for jb in view.judged(None if phase == "all" else phase)]


def _turns(prompt: str, answer: str, conversation: str = "") -> list[dict[str, str]]:
    """One side of a battle as OpenAI-style turns: every turn of a conversation (its references
    left out), else the prompt and the answer."""
    if conversation:
        return plain(decode(conversation))
    return [{"role": "user", "content": prompt}, {"role": "assistant", "content": answer}]


def _answers(turns: list[dict[str, str]]) -> str:
    """Every assistant turn's text (a conversation's style counts all of them, as Chatbot Arena's)."""
    return "\n\n".join(t["content"] for t in turns if t["role"] == "assistant")


def arena_rows(view: RunView, phase: str = "all") -> list[dict[str, Any]]:
    rows = []
    for jb, when in judged_with_times(view, phase):
        b, j = jb.battle, jb.judgment
        ca, cb = _turns(b.prompt, b.response_a, b.conversation_a), _turns(b.prompt, b.response_b, b.conversation_b)
        rows.append({"model_a": b.model_a, "model_b": b.model_b, "winner": j.winner, "judge": j.judge,
                     "category": b.category, "phase": b.phase, "iteration": b.iteration, "tstamp": round(when, 3),
                     "question_id": b.prompt_id, "battle_id": b.battle_id, "conversation_a": ca, "conversation_b": cb,
                     "turn": sum(1 for t in ca if t["role"] == "user"),
                     "conv_metadata": conv_metadata(_answers(ca), _answers(cb))})
    return rows


def write_rows(rows: list[dict[str, Any]], out: Path) -> None:
    """JSONL, a JSON list (``.json``) or Parquet (``.parquet``) by the file's suffix; atomic."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp"
    if out.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), tmp)
    elif out.suffix == ".json":
        tmp.write_text(json.dumps(rows, ensure_ascii=False, indent=1), encoding="utf-8")
    else:
        tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    tmp.replace(out)


def export_arena(view: RunView, out: Path, phase: str = "all") -> int:
    rows = arena_rows(view, phase)
    write_rows(rows, out)
    return len(rows)


def export_arena_hard(view: RunView, out: Path, phase: str = "all") -> int:
    """arena-hard-auto's folders under ``out``; returns the judgments written."""
    judged = judged_with_times(view, phase)
    questions: dict[str, dict[str, Any]] = {}
    answers: dict[str, dict[str, dict[str, Any]]] = {}
    judgments: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for jb, when in judged:
        b, j = jb.battle, jb.judgment
        sides = ((b.model_a, _turns(b.prompt, b.response_a, b.conversation_a)),
                 (b.model_b, _turns(b.prompt, b.response_b, b.conversation_b)))
        questions.setdefault(b.prompt_id, {"question_id": b.prompt_id, "category": b.category,
                                           "turns": [{"content": t["content"]} for t in sides[0][1] if t["role"] == "user"]})
        for model, turns in sides:
            answers.setdefault(model, {}).setdefault(b.prompt_id, {
                "question_id": b.prompt_id, "answer_id": stable_id("answer", model, b.prompt_id), "model_id": model,
                "choices": [{"index": 0, "turns": [{"content": t["content"]} for t in turns if t["role"] == "assistant"]}],
                "tstamp": round(when, 3)})
        for model, baseline, seat in ((b.model_a, b.model_b, "model_a"), (b.model_b, b.model_a, "model_b")):
            # arena-hard puts the baseline in seat A: the model won "B>A", lost "A>B"
            label = "A=B" if j.winner.startswith("tie") else ("B>A" if j.winner == seat else "A>B")
            judgments.setdefault((j.judge, model), []).append({
                "question_id": b.prompt_id, "model": model, "baseline": baseline, "judge": j.judge,
                "battle_id": b.battle_id, "games": [{"score": label, "judgment": j.raw}], "tstamp": round(when, 3)})
    write_rows(list(questions.values()), out / "question.jsonl")
    for model, by_q in answers.items():
        write_rows(list(by_q.values()), out / "model_answer" / f"{_safe(model)}.jsonl")
    for (judge, model), rows in judgments.items():
        write_rows(rows, out / "model_judgment" / _safe(judge) / f"{_safe(model)}.jsonl")
    return len(judged)



def _safe(name: str) -> str:
    """A model or judge name as a file name (``/`` and other separators replaced)."""
    return "".join(c if c.isalnum() or c in "@._-" else "_" for c in name) or "_"
