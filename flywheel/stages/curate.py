"""curate: an iteration's judged battles become SFT and DPO datasets on disk (Arena Learning's
rules; flywheel/learning/curation.py), with a dataset card and lineage."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone

from flywheel.ground.records import PlayerVersion, stable_id, team_members
from flywheel.learning.curation import DPO_COLUMNS, SFT_COLUMNS, columns_of, curate, dataset_card, save_dataset
from flywheel.learning.game_curation import MISSED as GAME_MISSED
from flywheel.learning.game_curation import RULES as GAME_RULES
from flywheel.learning.game_curation import TACTICS as GAME_TACTICS
from flywheel.learning.game_curation import curate_games
from flywheel.learning.hanabi_curation import LABELS as HANABI_LABELS
from flywheel.learning.hanabi_curation import RULES as HANABI_RULES
from flywheel.learning.hanabi_curation import curate_hanabi
from flywheel.run.context import Context, stage
from flywheel.run.results import CurateResult
from flywheel.stages.teach import taught_sft


@stage("curate", CurateResult, publishes="datasets")
def curate_datasets(ctx: Context, k: int) -> CurateResult:
    """Turn this iteration's judged battles into SFT and DPO datasets on disk."""
    eval_texts = {p.text for p in ctx.eval_split}
    held_out = eval_texts | {p.text for p in ctx.validation}  # neither split may reach training data
    battles = ctx.store.battles(k, "train")
    no_train = held_out | {" ".join(t.split()) for t in held_out}  # whitespace variants too
    hanabi = ctx.cfg.world.kind == "games" and "hanabi" in ctx.cfg.world.games.games
    if hanabi:
        references = frozenset(o.name for o in ctx.cfg.opponents if o.kind == "cautious")
        cur = curate_hanabi(battles, ctx.store.judgments(k, "train"), ctx.roster.targets, no_train, ctx.cfg.world.games,
                            references)
    elif ctx.cfg.world.kind == "games":
        cur = curate_games(battles, ctx.store.judgments(k, "train"), ctx.roster.targets, no_train, ctx.cfg.curate,
                           ctx.cfg.world.games)
    else:
        cur = curate(battles, ctx.store.judgments(k, "train"), ctx.roster.targets, no_train, ctx.cfg.curate)
        have = {(x.target, x.prompt) for x in cur.sft}  # a taught answer joins where battles made no example
        cur = replace(cur, sft=cur.sft + [x for x in taught_sft(ctx, k) if (x.target, x.prompt) not in have
                                          and x.prompt not in no_train])
    contestants = sorted({m for b in battles for team in (b.model_a, b.model_b) for m in team_members(team)})
    players = {"targets": [m for m in contestants if PlayerVersion.parse(m).k is not None],
               "opponents": [m for m in contestants if PlayerVersion.parse(m).k is None]}
    lineage = {
        "run_id": ctx.cfg.run.name, "iteration": k, "judge": ctx.judge.name, **players,
        "battle_log": ctx.store.shard_files("battles", k, "train"),
        "judgment_log": ctx.store.shard_files("judgments", k, "train"),
        "battles": len(battles), "curate": ctx.cfg.curate.model_dump(), "dropped": cur.dropped,
        **({} if cur.style is None else {"style_coefficients": cur.style}),
        "eval_split_hash": stable_id(*sorted(eval_texts)), "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    # Chat targets are trained in conversations: the datasets are conversational when any target chats.
    chat = any(ctx.roster.is_chat(t) for t in ctx.roster.targets)
    systems = {t: ctx.roster.config(t).system_prompt for t in ctx.roster.targets} if chat else None
    counts = {}
    games = ctx.cfg.world.games if ctx.cfg.world.kind == "games" else None
    labelled = HANABI_LABELS[ctx.cfg.world.games.hanabi.labels] if hanabi else ""  # what the rules read
    for kind, rows, cols in (("sft", cur.sft, SFT_COLUMNS), ("dpo", cur.dpo, DPO_COLUMNS)):
        rule = HANABI_RULES[kind] + labelled if hanabi else None if games is None else (
            GAME_RULES[kind] + (GAME_MISSED[kind] if games.missed_moves else "")
            + (GAME_TACTICS[kind] if games.tactics else "")
            + ("; each also in every rotation and reflection of its board" if games.symmetries else ""))
        card = dataset_card(kind, k, rows, ctx.judge.name, ctx.cfg.curate, cur.dropped, players=players, chat=chat,
                            rule=rule)
        counts[kind] = save_dataset(rows, columns_of(rows, cols), ctx.store.dataset_dir(k, kind), card, {"kind": kind, **lineage}, systems)
    return CurateResult(counts["sft"], counts["dpo"], cur.dropped)
