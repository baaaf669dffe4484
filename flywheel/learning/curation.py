"""Arena Learning's curation: lost battles become SFT examples, decisive ones DPO pairs."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from flywheel.config.tree import CurateConfig
from flywheel.ground.atomic import atomic_write_dir, atomic_write_text
from flywheel.ground.cards import hub_card, parquet_config
from flywheel.ground.chat import TEXT_COLUMNS, assistant, messages
from flywheel.ground.conversation import decode, encode, first_differing_turn, plain
from flywheel.ground.records import Battle, DPOPair, Judgment, SFTExample, base_name
from flywheel.learning.style_filter import style_explained

SFT_COLUMNS = ["prompt", "completion", "prompt_id", "category", "source_model", "battle_id", "iteration", "target"]
DPO_COLUMNS = ["prompt", "chosen", "rejected", "prompt_id", "category", "chosen_model", "rejected_model", "battle_id", "iteration", "target"]


def columns_of(rows: list, columns: list[str]) -> list[str]:
    """The dataset's columns: ``columns``, and ``history`` (a conversation's earlier turns, JSON)
    when some row comes from a conversation (single-turn datasets keep their columns)."""
    return columns + ["history"] if any(getattr(r, "history", "") for r in rows) else columns


@dataclass(frozen=True)
class Curated:
    sft: list[SFTExample]
    dpo: list[DPOPair]
    dropped: dict[str, int]
    style: dict[str, float] | None = None  # curate.style_control: the fitted style coefficients


def sft_example(b: Battle, *, prompt: str, completion: str, prompt_id: str, source_model: str, target: str,
                history: str = "") -> SFTExample:
    """An SFT example learnt from battle ``b``: it carries the battle's category, id and iteration."""
    return SFTExample(prompt=prompt, completion=completion, prompt_id=prompt_id, category=b.category,
                      source_model=source_model, battle_id=b.battle_id, iteration=b.iteration, target=target,
                      history=history)


def dpo_pair(b: Battle, *, prompt: str, chosen: str, rejected: str, prompt_id: str, chosen_model: str,
             rejected_model: str, target: str, history: str = "") -> DPOPair:
    """A DPO pair learnt from battle ``b``: it carries the battle's category, id and iteration."""
    return DPOPair(prompt=prompt, chosen=chosen, rejected=rejected, prompt_id=prompt_id, category=b.category,
                   chosen_model=chosen_model, rejected_model=rejected_model, battle_id=b.battle_id,
                   iteration=b.iteration, target=target, history=history)


def curate(
    battles: list[Battle], judgments: dict[str, Judgment], targets: list[str], eval_texts: set[str], cfg: CurateConfig
) -> Curated:
    """SFT: the winner's response wherever a target lost (and, optionally, the target's own wins and
    its answers in ties where both were good). DPO: (winner, loser) from every decisive battle with
    a target in it. Eval prompts never pass. With ``cfg.style_control``, wins that style explains
    pass neither (``flywheel.learning.style_filter``)."""
    sft: list[SFTExample] = []
    dpo: list[DPOPair] = []
    dropped = {"invalid": 0, "failed": 0, "undecided": 0, "weak": 0, "contaminated": 0, "too_long": 0,
               "too_short": 0, "duplicate": 0}
    seen_sft: set[tuple[str, str]] = set()  # (target, prompt): each target's own examples
    seen_dpo: set[tuple[str, str]] = set()
    target_set = set(targets)
    styled = style_explained(battles, judgments, cfg.style_tolerance) if cfg.style_control else None
    if styled is not None:
        dropped["style"] = 0
    for b in battles:
        if cfg.include_target_ties and _good_tie(b, judgments.get(b.battle_id)):
            seats = ((b.model_a, b.response_a), (b.model_b, b.response_b))
            mine = next(((m, r) for m, r in seats if base_name(m) in target_set), None)
            if mine is not None and b.multi_turn:
                turns = side_turns(b, mine[0], judgments.get(b.battle_id))
                if _unfit_turns(b.prompt, turns, cfg, eval_texts) is None:
                    _add_turns(sft, seen_sft, b, model=mine[0], target=base_name(mine[0]), turns=turns, dedup=cfg.dedup)
            elif mine is not None and _unfit(b.prompt, mine[1], cfg, eval_texts) is None:
                model, text = mine
                key = (base_name(model), b.prompt)
                if not (cfg.dedup and key in seen_sft):
                    seen_sft.add(key)
                    sft.append(sft_example(b, prompt=b.prompt, completion=text, prompt_id=b.prompt_id,
                                           source_model=model, target=key[0]))
        j = decisive(b, judgments.get(b.battle_id), dropped)
        if j is None:
            continue
        if j.margin < cfg.min_margin:
            dropped["weak"] += 1
            continue
        if styled is not None and b.battle_id in styled.explained:
            dropped["style"] += 1
            continue
        win_model, win_text, lose_model, lose_text = (
            (b.model_a, b.response_a, b.model_b, b.response_b)
            if j.winner == "model_a"
            else (b.model_b, b.response_b, b.model_a, b.response_a)
        )
        turns = side_turns(b, win_model, j) if b.multi_turn else []
        why = _unfit_turns(b.prompt, turns, cfg, eval_texts) if b.multi_turn else _unfit(b.prompt, win_text, cfg, eval_texts)
        if why is not None:
            dropped[why] += 1
            continue
        target_lost = base_name(lose_model) in target_set
        target_won = base_name(win_model) in target_set
        target = base_name(lose_model if target_lost else win_model)
        if b.multi_turn:
            if target_lost or (target_won and cfg.include_target_wins):
                _add_turns(sft, seen_sft, b, model=win_model, target=target, turns=turns, dedup=cfg.dedup)
            pair = differing_turn(b, win_model, j) if target_lost or target_won else None
            if pair is not None and not (cfg.dedup and (target, pair[0] + "\x1e" + pair[1]) in seen_dpo):
                seen_dpo.add((target, pair[0] + "\x1e" + pair[1]))
                dpo.append(dpo_pair(b, prompt=pair[1], chosen=pair[2], rejected=pair[3], prompt_id=b.prompt_id,
                                    chosen_model=win_model, rejected_model=lose_model, target=target, history=pair[0]))
            continue
        if target_lost or (target_won and cfg.include_target_wins):
            if cfg.dedup and (target, b.prompt) in seen_sft:
                dropped["duplicate"] += 1
            else:
                seen_sft.add((target, b.prompt))
                sft.append(sft_example(b, prompt=b.prompt, completion=win_text, prompt_id=b.prompt_id,
                                       source_model=win_model, target=target))
        if (target_lost or target_won) and not (cfg.dedup and (target, b.prompt) in seen_dpo):
            seen_dpo.add((target, b.prompt))
            dpo.append(dpo_pair(b, prompt=b.prompt, chosen=win_text, rejected=lose_text, prompt_id=b.prompt_id,
                                chosen_model=win_model, rejected_model=lose_model, target=target))
    return Curated(sft, dpo, dropped, None if styled is None else styled.coefficients)


def _unfit(prompt: str, text: str, cfg: CurateConfig, eval_texts: set[str]) -> str | None:
    """Why ``text`` answering ``prompt`` may not become training data (an eval prompt, also up to
    whitespace; too long; too short), or None."""
    if prompt in eval_texts or " ".join(prompt.split()) in eval_texts:
        return "contaminated"
    if len(text) > cfg.max_completion_chars:
        return "too_long"
    if len(text.strip()) < cfg.min_completion_chars:
        return "too_short"
    return None


Turn = tuple[str, str, str]  # (history before the user turn as JSON, the user turn, the answer)


def _marks(j: Judgment | None, seat: str) -> list:
    """A seat's per-turn marks in a judgment (``Judgment.turns``: 1 right, 0 wrong), or none."""
    return json.loads(j.turns).get(seat, []) if j is not None and j.turns else []


def side_turns(b: Battle, model: str, j: Judgment | None = None) -> list[Turn]:
    """Every answer of ``model``'s side of a conversation battle, with the turn it answers and the
    history before it (the side's own earlier answers; references left out). An answer the judge
    marked wrong (a verifier's per-turn marks) is left out; the later turns keep it in their history."""
    seat = "a" if model == b.model_a else "b"
    msgs = decode(b.conversation_a if seat == "a" else b.conversation_b)
    marks = _marks(j, seat)
    answers = [i for i, m in enumerate(msgs) if m["role"] == "assistant" and i > 0]
    return [(encode(plain(msgs[:i - 1])), msgs[i - 1]["content"], msgs[i]["content"])
            for t, i in enumerate(answers) if not (t < len(marks) and marks[t] == 0)]


def differing_turn(b: Battle, winner: str, j: Judgment | None = None) -> tuple[str, str, str, str] | None:
    """(shared history, user turn, winner's answer, loser's answer) at the first turn where the two
    answers differ: a DPO pair shares its history and differs in its final assistant turn. With
    per-turn marks, only where the winner's answer there is right and the loser's wrong."""
    a, bb = decode(b.conversation_a), decode(b.conversation_b)
    i = first_differing_turn(a, bb)
    if i is None or i == 0:
        return None
    seat = "a" if winner == b.model_a else "b"
    win, lose = (a, bb) if seat == "a" else (bb, a)
    t = sum(1 for m in a[:i] if m["role"] == "user") - 1
    mw, ml = _marks(j, seat), _marks(j, "b" if seat == "a" else "a")
    if t < len(mw) and t < len(ml) and (mw[t] != 1 or ml[t] != 0):
        return None
    return encode(plain(a[:i - 1])), a[i - 1]["content"], win[i]["content"], lose[i]["content"]


def _unfit_turns(prompt: str, turns: list[Turn], cfg: CurateConfig, eval_texts: set[str]) -> str | None:
    """Why a conversation side may not become training data: its first turn an eval prompt, or an
    answer too long or too short (the first reason found), or None."""
    for _, _, answer in turns or [("", "", "")]:
        why = _unfit(prompt, answer, cfg, eval_texts)
        if why is not None:
            return why
    return None


def _add_turns(sft: list[SFTExample], seen: set[tuple[str, str]], b: Battle, *, model: str, target: str,
               turns: list[Turn], dedup: bool) -> None:
    """One SFT row per answer of a conversation side: its history, the user turn, the answer."""
    for history, text, answer in turns:
        key = (target, f"{history}\x1e{text}" if history else text)
        if dedup and key in seen:
            continue
        seen.add(key)
        sft.append(sft_example(b, prompt=text, completion=answer, prompt_id=b.prompt_id, source_model=model,
                               target=target, history=history))


def _good_tie(b: Battle, j: Judgment | None) -> bool:
    """A played battle judged a tie with both answers good (never ``tie (bothbad)``)."""
    return b.ok and j is not None and j.winner == "tie"


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
    asks it (the row's target's system prompt, a conversation's earlier turns, then the user turn),
    ``completion`` / ``chosen`` / ``rejected`` are one assistant turn each."""
    data = {c: [getattr(r, c) for r in rows] for c in columns}
    data["prompt"] = [messages(r.prompt, systems.get(r.target), decode(getattr(r, "history", ""))) for r in rows]
    for c in TEXT_COLUMNS[1:]:
        if c in data:
            data[c] = [assistant(x) for x in data[c]]
    return data


DATA_FILE = "data/train-00000-of-00001.parquet"  # the Hub's layout: one split, one shard


def save_dataset(rows: list, columns: list[str], out: Path, card: str, lineage: dict | None = None,
                 systems: dict[str, str | None] | None = None) -> int:
    """Write ``rows`` as a Hub-ready dataset folder, atomically: ``data/train-*.parquet`` (which
    ``load_dataset("parquet")``, pandas and duckdb read), the ``README.md`` card (YAML front
    matter first) and the lineage (``manifest.json``). With ``systems`` (target -> its system
    prompt, for chat targets) the rows are conversational (see ``conversational``); else text."""
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
        import pyarrow.parquet as pq

        (tmp / DATA_FILE).parent.mkdir(parents=True)
        table = Dataset.from_dict(data, features=features).data.table
        if len(table):
            pq.write_table(table, tmp / DATA_FILE)
        else:  # no row group at all (an empty one stops load_dataset): only the schema
            pq.ParquetWriter(tmp / DATA_FILE, features.arrow_schema).close()
        atomic_write_text(tmp / "README.md", card)
        if lineage is not None:
            atomic_write_text(tmp / "manifest.json", json.dumps({**lineage, "rows": len(rows), "columns": columns,
                                                                "format": "conversational" if systems is not None
                                                                else "text"}, indent=2))

    atomic_write_dir(out, fill)
    return len(rows)


def load_dataset_dir(folder: Path):
    """A curated dataset folder as an in-memory ``datasets.Dataset`` (nothing cached beside it):
    the Parquet layout, or ``save_to_disk``'s of run directories made before it."""
    from datasets import Dataset, load_from_disk

    folder = Path(folder)
    if (folder / "state.json").is_file():
        return load_from_disk(str(folder), keep_in_memory=True)
    files = sorted((folder / "data").glob("*.parquet"))
    if not files:
        raise FileNotFoundError(f"{folder}: no dataset (neither data/*.parquet nor a save_to_disk folder)")
    import pyarrow as pa
    import pyarrow.parquet as pq

    return Dataset(pa.concat_tables([pq.read_table(f) for f in files]))


def dataset_card(kind: str, iteration: int, rows: list, judge: str, cfg: CurateConfig, dropped: dict[str, int], *,
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
    text = (
        f"# {kind.upper()} data, iteration {iteration}\n\n"
        f"- rows: {len(rows)}\n- rule: {rule}\n- judge: {judge}\n"
        f"- format: {'conversational (TRL: lists of role/content turns)' if chat else 'text'}\n"
        + "".join(f"- {role}: {', '.join(names)}\n" for role, names in (players or {}).items())
        + f"- filters: {json.dumps(cfg.model_dump())}\n- dropped: {json.dumps(dropped)}\n"
        f"- sources: {json.dumps(dict(sorted(sources.items())))}\n"
        f"- categories: {json.dumps(dict(sorted(categories.items())))}\n\n"
        "Open with `datasets.load_dataset(\"parquet\", data_dir=\"<this directory>/data\", split=\"train\")`, "
        "`pandas.read_parquet(\"<this directory>/data\")` or duckdb (`SELECT * FROM '<this directory>/data/*.parquet'`). "
        "The license field is `other`: the texts come from the run's players, under their own terms.\n"
    )
    return hub_card("dataset", text, license="other", task_categories=["text-generation"],
                    tags=["trl", kind, "arena-learning", "flywheel", "conversational" if chat else "text"],
                    size_categories=[_size_category(len(rows))],
                    configs=[parquet_config("default", "data/train-*.parquet")])


def _size_category(n: int) -> str:
    """The Hub's size bucket of a dataset of ``n`` rows."""
    for limit, name in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M")):
        if n < limit:
            return name
    return "n>1M"
