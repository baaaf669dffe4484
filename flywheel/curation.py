"""Arena Learning's curation: lost battles become SFT examples, decisive ones DPO pairs."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from flywheel.chat import TEXT_COLUMNS, assistant, messages
from flywheel.config import CurateConfig
from flywheel.records import Battle, DPOPair, Judgment, SFTExample, base_name
from flywheel.store import atomic_write_dir, atomic_write_text

SFT_COLUMNS = ["prompt", "completion", "prompt_id", "category", "source_model", "battle_id", "iteration", "target"]
DPO_COLUMNS = ["prompt", "chosen", "rejected", "prompt_id", "category", "chosen_model", "rejected_model", "battle_id", "iteration", "target"]


@dataclass(frozen=True)
class Curated:
    sft: list[SFTExample]
    dpo: list[DPOPair]
    dropped: dict[str, int]


def curate(
    battles: list[Battle], judgments: dict[str, Judgment], targets: list[str], eval_texts: set[str], cfg: CurateConfig
) -> Curated:
    """SFT: the winner's response wherever a target lost (and, optionally, the target's own wins).
    DPO: (winner, loser) from every decisive battle with a target in it. Eval prompts never pass."""
    sft: list[SFTExample] = []
    dpo: list[DPOPair] = []
    dropped = {"invalid": 0, "failed": 0, "undecided": 0, "weak": 0, "contaminated": 0, "too_long": 0,
               "too_short": 0, "duplicate": 0}
    seen_sft: set[tuple[str, str]] = set()  # (target, prompt): each target's own examples
    seen_dpo: set[tuple[str, str]] = set()
    target_set = set(targets)
    for b in battles:
        j = decisive(b, judgments.get(b.battle_id), dropped)
        if j is None:
            continue
        if j.margin < cfg.min_margin:
            dropped["weak"] += 1
            continue
        if b.prompt in eval_texts or " ".join(b.prompt.split()) in eval_texts:
            dropped["contaminated"] += 1
            continue
        win_model, win_text, lose_model, lose_text = (
            (b.model_a, b.response_a, b.model_b, b.response_b)
            if j.winner == "model_a"
            else (b.model_b, b.response_b, b.model_a, b.response_a)
        )
        if len(win_text) > cfg.max_completion_chars:
            dropped["too_long"] += 1
            continue
        if len(win_text.strip()) < cfg.min_completion_chars:
            dropped["too_short"] += 1
            continue
        target_lost = base_name(lose_model) in target_set
        target_won = base_name(win_model) in target_set
        target = base_name(lose_model if target_lost else win_model)
        if target_lost or (target_won and cfg.include_target_wins):
            if cfg.dedup and (target, b.prompt) in seen_sft:
                dropped["duplicate"] += 1
            else:
                seen_sft.add((target, b.prompt))
                sft.append(SFTExample(b.prompt, win_text, b.prompt_id, b.category, win_model, b.battle_id, b.iteration, target))
        if (target_lost or target_won) and not (cfg.dedup and (target, b.prompt) in seen_dpo):
            seen_dpo.add((target, b.prompt))
            dpo.append(DPOPair(b.prompt, win_text, lose_text, b.prompt_id, b.category, win_model, lose_model, b.battle_id, b.iteration, target))
    return Curated(sft, dpo, dropped)


def decisive(b: Battle, j: Judgment | None, dropped: dict[str, int]) -> Judgment | None:
    """The battle's judgment if it is a valid, decisive verdict on a battle that was played;
    else None, counted in ``dropped`` (failed, invalid or undecided)."""
    why = "failed" if not b.ok else "invalid" if j is None or not j.valid else \
        "undecided" if j.winner not in ("model_a", "model_b") else None
    if why is not None:
        dropped[why] += 1
        return None
    return j


def conversational(rows: list, columns: list[str], systems: dict[str, str | None]) -> dict[str, list]:
    """The columns of ``rows`` in TRL's conversational format: ``prompt`` is the conversation that
    asks it (the row's target's system prompt, then the user turn), ``completion`` / ``chosen`` /
    ``rejected`` are one assistant turn each."""
    data = {c: [getattr(r, c) for r in rows] for c in columns}
    data["prompt"] = [messages(r.prompt, systems.get(r.target)) for r in rows]
    for c in TEXT_COLUMNS[1:]:
        if c in data:
            data[c] = [assistant(x) for x in data[c]]
    return data


def save_dataset(rows: list, columns: list[str], out: Path, card: str, lineage: dict | None = None,
                 systems: dict[str, str | None] | None = None) -> int:
    """Write ``rows`` as an HF dataset (``save_to_disk``) plus a README card and its lineage
    (``manifest.json``), atomically. With ``systems`` (target -> its system prompt, for chat
    targets) the rows are conversational (see ``conversational``); else plain text."""
    from datasets import Dataset, Features, Value

    types: dict = {"iteration": Value("int64")}
    if systems is not None:
        turn = {"role": Value("string"), "content": Value("string")}
        types.update({c: [turn] for c in TEXT_COLUMNS})
        data = conversational(rows, columns, systems)
    else:
        data = {c: [getattr(r, c) for r in rows] for c in columns}
    features = Features({c: types.get(c, Value("string")) for c in columns})

    def fill(tmp: Path) -> None:
        Dataset.from_dict(data, features=features).save_to_disk(str(tmp))
        if not rows:
            _write_empty_shard(tmp, features)
        atomic_write_text(tmp / "README.md", card)
        if lineage is not None:
            atomic_write_text(tmp / "manifest.json", json.dumps({**lineage, "rows": len(rows), "columns": columns,
                                                                "format": "conversational" if systems is not None
                                                                else "text"}, indent=2))

    atomic_write_dir(out, fill)
    return len(rows)


def _write_empty_shard(folder: Path, features) -> None:
    """``datasets`` saves an empty dataset with no data file, and then cannot load it back.
    Write the one (empty) shard it expects, so every iteration's dataset opens."""
    import pyarrow as pa

    name = "data-00000-of-00001.arrow"
    with pa.OSFile(str(folder / name), "wb") as fh, pa.ipc.new_stream(fh, features.arrow_schema) as w:
        w.write_batch(pa.RecordBatch.from_pylist([], schema=features.arrow_schema))
    state = json.loads((folder / "state.json").read_text())
    state["_data_files"] = [{"filename": name}]
    atomic_write_text(folder / "state.json", json.dumps(state, indent=2))


def dataset_card(kind: str, iteration: int, rows: list, judge: str, cfg: CurateConfig, dropped: dict[str, int],
                 players: dict[str, list[str]] | None = None, chat: bool = False, rule: str | None = None) -> str:
    sources: dict[str, int] = {}
    categories: dict[str, int] = {}
    for r in rows:
        src = getattr(r, "source_model", None) or r.chosen_model
        sources[src] = sources.get(src, 0) + 1
        categories[r.category] = categories.get(r.category, 0) + 1
    rule = rule or (
        "the winner's response wherever a target lost (Arena Learning SFT rule)"
        if kind == "sft"
        else "(winner, loser) responses of decisive battles with a target in them"
    )
    return (
        f"# {kind.upper()} data, iteration {iteration}\n\n"
        f"- rows: {len(rows)}\n- rule: {rule}\n- judge: {judge}\n"
        f"- format: {'conversational (TRL: lists of role/content turns)' if chat else 'text'}\n"
        + "".join(f"- {role}: {', '.join(names)}\n" for role, names in (players or {}).items())
        + f"- filters: {json.dumps(cfg.model_dump())}\n- dropped: {json.dumps(dropped)}\n"
        f"- sources: {json.dumps(dict(sorted(sources.items())))}\n"
        f"- categories: {json.dumps(dict(sorted(categories.items())))}\n\n"
        "Open with `datasets.load_from_disk(<this directory>)`.\n"
    )
