"""Play battles (with a generation cache) and judge them, a batch at a time, into the run's logs."""

from __future__ import annotations

import logging

from flywheel.arena.conversations import play_conversations
from flywheel.arena.games import play_games
from flywheel.arena.generation import _usage, cached_answers, generate_cached, generation_keys  # noqa: F401 - their home was here
from flywheel.arena.hanabi_play import play_hanabi
from flywheel.ground.progress import Progress
from flywheel.ground.records import Battle, BattleSpec, Prompt
from flywheel.ground.store import RunStore
from flywheel.worlds.world import Roster
from judges.pairwise import PairwiseJudge

log = logging.getLogger("flywheel")


def play_battles(
    roster: Roster, store: RunStore, specs: list[BattleSpec], prompts: dict[str, Prompt], shard_size: int = 500
) -> int:
    """Play every spec not yet in the battle log, appending one shard per ``shard_size`` battles.
    Returns how many battles were played now."""
    if not specs:
        return 0
    have = {b.battle_id for b in store.battles(specs[0].iteration, specs[0].phase)}
    todo = [s for s in specs if s.battle_id not in have]
    with Progress(len(todo), f"battles iter {specs[0].iteration} {specs[0].phase}", "battles") as bar:
        for start in range(0, len(todo), shard_size):
            play_batch(roster, store, todo[start : start + shard_size], prompts)
            bar.update(len(todo[start : start + shard_size]))
    return len(todo)


def play_batch(roster: Roster, store: RunStore, todo: list[BattleSpec], prompts: dict[str, Prompt],
               name: str | None = None) -> None:
    """Play ``todo`` and append them to the battle log as one shard (named ``name``, if given).
    In a games world a battle is a game played move by move (flywheel/arena/games.py)."""
    if roster.cfg.world.kind == "games":
        return _play_games(roster, store, todo, prompts, name)
    if roster.asker() is not None or any(prompts[s.prompt_id].turns for s in todo):
        return store.append_battles(play_conversations(roster, store, todo, prompts), name)
    need: dict[str, list[Prompt]] = {}
    for s in todo:
        for m in (s.model_a, s.model_b):
            need.setdefault(m, []).append(prompts[s.prompt_id])
    k, phase = todo[0].iteration, todo[0].phase
    answers = {m: generate_cached(roster, store, m, ps, k, phase) for m, ps in need.items()}
    battles = []
    for s in todo:
        p = prompts[s.prompt_id]
        ga, gb = answers[s.model_a][p.id], answers[s.model_b][p.id]
        error = "; ".join(f"{g.player}: {g.error}" for g in (ga, gb) if not g.ok) or None
        battles.append(Battle.from_spec(s, p, response_a=ga.text, response_b=gb.text, error=error))
    store.append_battles(battles, name)


def _play_games(roster: Roster, store: RunStore, todo: list[BattleSpec], prompts: dict[str, Prompt],
                name: str | None) -> None:
    gc = roster.cfg.world.games
    play = play_hanabi if "hanabi" in gc.games else play_games
    battles, usage = play(roster, todo, prompts, gc.prompt, gc.max_illegal)
    store.append_battles(battles, name)
    for row in usage:
        store.append_usage({"iteration": todo[0].iteration, "phase": todo[0].phase, **row})


def judge_pending(judge: PairwiseJudge, store: RunStore, iteration: int, phase: str, shard_size: int = 500) -> int:
    """Judge every battle of (iteration, phase) that has no judgment yet, a shard at a time (each
    shard's judgments are saved before the next starts). Failed battles are not judged: they
    stay in the log with their error and never count."""
    done = store.judgments(iteration, phase)
    todo = [b for b in store.battles(iteration, phase) if b.battle_id not in done and b.ok]
    with Progress(len(todo), f"judgments iter {iteration} {phase}", "battles") as bar:
        for start in range(0, len(todo), shard_size):
            judge_batch(judge, store, todo[start : start + shard_size], iteration, phase)
            bar.update(len(todo[start : start + shard_size]))
    return len(todo)


def judge_batch(judge: PairwiseJudge, store: RunStore, todo: list[Battle], iteration: int, phase: str,
                name: str | None = None) -> None:
    """Judge ``todo`` and append the judgments as one shard (named ``name``, if given)."""
    if not todo:
        return
    llms = judge.llm_judges()
    before = [(_usage(j.player), j.calls, j.cache_hits, j.judged) for j in llms]
    judgments = judge.judge(todo)
    if len(judgments) != len(todo):
        raise RuntimeError(f"judge {judge.name} returned {len(judgments)} judgments for {len(todo)} battles")
    store.append_judgments(judgments, iteration, phase, name)
    for j, (usage, calls, hits, judged) in zip(llms, before):  # judged: battles this LLM judge was given
        after = _usage(j.player)
        row = {"iteration": iteration, "phase": phase, "player": f"judge:{j.player.name}", "judged": j.judged - judged,
               "judge_calls": j.calls - calls, "cache_hits": j.cache_hits - hits,
               "invalid": sum(1 for x in judgments if not x.valid)}
        row.update({k: round(after[k] - usage.get(k, 0), 6) for k in after})
        store.append_usage(row)
