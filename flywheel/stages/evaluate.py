"""evaluate: every target's newest version answers the held-out eval split and battles each
opponent (reported only); accuracy per category, Bradley-Terry Elo with CIs over all eval
battles so far, Elo on WizardArena's diverse / hard subsets; in a conversation world, turn 2 on
each model's own first answer and on a fixed second turn (``evaluate_turns.py``); and the
validation split's figures, which steer the run."""

from __future__ import annotations

from typing import Any

import numpy as np

from flywheel.arena.battles import generate_cached, judge_pending, play_battles
from flywheel.arena.conversations import converse
from flywheel.arena.evaluation import SUBSET_RULES, accuracy, conversation_accuracy, eval_subsets, held_out_spec
from flywheel.arena.game_scores import tally, win_or_draw
from flywheel.arena.games import play_games
from flywheel.ground import reports
from flywheel.ground.atomic import atomic_write_json, atomic_write_text, read_json
from flywheel.ground.conversation import decode
from flywheel.ground.records import SCORE_A, BattleSpec, JudgedBattle, stable_id, versioned
from flywheel.ground.store import iter_name
from flywheel.maths.active_eval import choose_round, ci_widths, fit_with_cov, uncertain_neighbours
from flywheel.maths.leaderboard import board
from flywheel.players.player import ScoresReferences
from flywheel.run.context import Context, stage
from flywheel.run.results import EvalResult, Validation, VersionEval
from flywheel.stages.evaluate_hanabi import evaluate_hanabi
from flywheel.stages.evaluate_turns import second_turns


@stage("evaluate", EvalResult, publishes="leaderboard")
def evaluate_versions(ctx: Context, k: int) -> EvalResult:
    versions = [versioned(t, k) for t in ctx.roster.targets]
    active = ctx.cfg.evaluate.sampling == "active"  # prompt worlds only (the config says so)
    if ctx.cfg.world.kind == "games" and "hanabi" in ctx.cfg.world.games.games:
        return evaluate_hanabi(ctx, k, versions, _publish)
    if active:
        play_active(ctx, k, versions)
    else:
        specs = [held_out_spec(k, "eval", v, opp, p) for v in versions for opp in ctx.roster.opponents
                 for p in ctx.eval_split]
        play_battles(ctx.roster, ctx.store, specs, ctx.prompts, ctx.cfg.run.shard_size)
        judge_pending(ctx.judge, ctx.store, k, "eval", ctx.cfg.run.shard_size)
    if ctx.cfg.world.kind == "games":
        return _evaluate_games(ctx, k, versions)
    by_model = {r.model: r for r in board(ctx.store.judged(None, "eval"), ctx.cfg.rating, ctx.cfg.evaluate.bootstrap_seed)}
    responses: dict[str, dict[str, str]] = {}
    if active:  # not every pair met on every prompt: every model answers the whole eval split
        for m in versions + ctx.roster.opponents:
            got = generate_cached(ctx.roster, ctx.store, m, ctx.eval_split, k, "eval")
            responses[m] = {pid: g.text for pid, g in got.items() if g.ok}
    talks: dict[str, dict[str, list]] = {}  # conversations: model -> prompt id -> messages
    for bt in ctx.store.battles(k, "eval"):
        for m, answer, conv in ((bt.model_a, bt.response_a, bt.conversation_a), (bt.model_b, bt.response_b,
                                                                                 bt.conversation_b)):
            if conv:
                talks.setdefault(m, {})[bt.prompt_id] = decode(conv)
                answer = next((x["content"] for x in talks[m][bt.prompt_id] if x["role"] == "assistant"), "")
            responses.setdefault(m, {})[bt.prompt_id] = answer  # (a conversation's first answer)
    subsets = _subset_boards(ctx, k, {m: responses.get(m, {}) for m in ctx.roster.opponents})
    turn2 = second_turns(ctx, k, versions + ctx.roster.opponents, talks) if talks else {}
    evals: dict[str, VersionEval] = {}
    for m in versions + ctx.roster.opponents:
        by_turn = None
        if m in talks:
            acc, by_cat, by_turn = conversation_accuracy(talks[m], ctx.eval_split, ctx.correct)
        else:
            acc, by_cat = accuracy(responses.get(m, {}), ctx.eval_split, ctx.correct)
        in_subsets = {name: next((x["rating"] for x in rows if x["model"] == m), None) for name, rows in subsets.items()}
        target = m in versions
        evals[m] = VersionEval.rated(by_model.get(m), accuracy=acc, accuracy_by_category=by_cat,
                                     elo_by_subset=in_subsets,
                                     eval_loss=_reference_loss(ctx, m, ctx.eval_split) if target else None,
                                     validation=validate(ctx, m, k) if target else _opponent_validation(ctx, m, k),
                                     accuracy_by_turn=by_turn,
                                     turn2=turn2.get(m))
    rows = [r.to_dict() for r in by_model.values()]
    _publish(ctx, k, rows)
    return EvalResult(evals, rows)


def play_active(ctx: Context, k: int, versions: list[str]) -> int:
    """Active eval sampling: rounds of ``evaluate.round_size`` battles between the new versions
    and the opponents, each round chosen from the Bradley-Terry fit of every eval battle judged
    so far (flywheel/maths/active_eval.py), until each new version's 95% interval is at most
    ``evaluate.target_ci_width`` Elo with no uncertain order next to it, or ``max_battles``, or
    no pair has an eval prompt left. A pair takes its prompts in a fixed order of the seed.
    Each round's battles are stored (``stages/eval-active-r<r>.json``) before they are played,
    so a resumed run plays exactly them. Returns the eval battles of this iteration."""
    ec, opponents = ctx.cfg.evaluate, ctx.roster.opponents
    budget = ec.max_battles or len(versions) * len(opponents) * len(ctx.eval_split)
    queues = {(v, o): sorted(ctx.eval_split, key=lambda p: stable_id("eval-order", ctx.cfg.run.seed, v, o, p.id))
              for v in versions for o in opponents}
    played: list[BattleSpec] = []
    rnd = 0
    while True:
        rnd += 1
        path = ctx.store.stage_path(k, f"eval-active-r{rnd}")
        stored = read_json(path)
        if stored is None:
            judged = ctx.store.judged(None, "eval")
            models = sorted({m for jb in judged for m in (jb.battle.model_a, jb.battle.model_b)}
                            | set(versions) | set(opponents))
            index = {m: i for i, m in enumerate(models)}
            w = np.zeros((len(models), len(models)))
            for jb in judged:
                a, b = index[jb.battle.model_a], index[jb.battle.model_b]
                w[a, b] += SCORE_A[jb.winner]
                w[b, a] += 1 - SCORE_A[jb.winner]
            theta, cov = fit_with_cov(w)
            mine = {index[v] for v in versions}
            settled = (max(ci_widths(cov)[list(mine)]) <= ec.target_ci_width
                       and not any(i in mine or j in mine for i, j in uncertain_neighbours(theta, cov)))
            used = {(v, o): sum(1 for s in played if {s.model_a, s.model_b} == {v, o}) for v, o in queues}
            left = {(index[v], index[o]): len(queues[v, o]) - used[v, o] for v, o in queues}
            size = min(ec.round_size, budget - len(played))
            chosen = [] if (rnd > 1 and settled) or size <= 0 else choose_round(
                theta, cov, list(left), size, ec.width_weight, left)
            taken = dict.fromkeys(queues, 0)
            specs = []
            for i, j in chosen:
                v, o = models[i], models[j]
                specs.append(held_out_spec(k, "eval", v, o, queues[v, o][used[v, o] + taken[v, o]]))
                taken[v, o] += 1
            stored = {"battles": [s.to_row() for s in specs], "settled": bool(settled),
                      "max_ci_width": float(max(ci_widths(cov)[list(mine)]))}
            atomic_write_json(path, stored)
        specs = [BattleSpec.from_row(r) for r in stored["battles"]]
        if not specs:
            return len(played)
        play_battles(ctx.roster, ctx.store, specs, ctx.prompts, ctx.cfg.run.shard_size)
        judge_pending(ctx.judge, ctx.store, k, "eval", ctx.cfg.run.shard_size)
        played += specs


def _evaluate_games(ctx: Context, k: int, versions: list[str]) -> EvalResult:
    """A games world's eval: each model's win-or-draw rate (overall, per game, per opponent) in
    this iteration's eval games, Elo over all eval games so far (with each model's win-or-draw
    rate against each reference player as ``wd_vs_<name>`` columns), and each target version's
    win-or-draw rate on the validation positions."""
    judged = ctx.store.judged(k, "eval")
    every = ctx.store.judged(None, "eval")
    evals: dict[str, VersionEval] = {}
    by_model = {r.model: r for r in board(every, ctx.cfg.rating, ctx.cfg.evaluate.bootstrap_seed)}
    for m in versions + ctx.roster.opponents:
        acc, by_cat = win_or_draw(judged, m)
        evals[m] = VersionEval.rated(by_model.get(m), accuracy=acc, accuracy_by_category=by_cat,
                                     validation=_validate_games(ctx, m, k) if m in versions else None,
                                     games=tally(judged, m))
    rows = []
    for r in by_model.values():
        versus = tally(every, r.model)
        rows.append({**r.to_dict(), **{f"wd_vs_{o}": versus[o]["win_or_draw"] for o in ctx.roster.opponents
                                       if o in versus}})
    _publish(ctx, k, rows)
    return EvalResult(evals, rows)


def _validate_games(ctx: Context, version: str, k: int) -> Validation:
    """A target version's win-or-draw rate against every opponent from the validation positions
    (played and judged here, not logged: what steers the run, never the eval split)."""
    specs = [held_out_spec(k, "validation", version, opp, p) for opp in ctx.roster.opponents for p in ctx.validation]
    gc = ctx.cfg.world.games
    played = [b for b in play_games(ctx.roster, specs, ctx.prompts, gc.prompt, gc.max_illegal)[0] if b.ok]
    judged = [JudgedBattle(b, j) for b, j in zip(played, ctx.judge.judge(played)) if j.valid]
    acc, by_cat = win_or_draw(judged, version)
    return Validation(len(ctx.validation), acc, by_cat)


def _publish(ctx: Context, k: int, rows: list[dict[str, Any]]) -> None:
    """ratings/iter-000k.json and .md, and the Elo history."""
    atomic_write_json(ctx.store.ratings_path(f"{iter_name(k)}.json"), rows)
    atomic_write_text(ctx.store.ratings_path(f"{iter_name(k)}.md"),
                      f"# Eval leaderboard after iteration {k}\n\n" + reports.markdown_table(rows, reports.columns_for(rows)) + "\n")
    history = read_json(ctx.store.ratings_path("history.json"), {})
    history[str(k)] = rows
    atomic_write_json(ctx.store.ratings_path("history.json"), history)


def _reference_loss(ctx: Context, version: str, prompts: list) -> float | None:
    """The per-token loss of the reference answers, for a player that scores them (local
    transformers targets); None for the others."""
    if not issubclass(ctx.roster.player_class(version), ScoresReferences):
        return None
    player = ctx.roster.player(version)
    return player.reference_loss(prompts) if isinstance(player, ScoresReferences) else None


def _converses(ctx: Context) -> bool:
    """Whether the validation split is held as conversations (an asker, or prompts with turns)."""
    return ctx.roster.asker() is not None or any(p.turns for p in ctx.validation)


def _opponent_validation(ctx: Context, opponent: str, k: int) -> Validation | None:
    """An opponent's accuracy on the validation split, the bar a target's validation figures are
    read against (answered once a run, through the generation cache); None in a conversation
    world, where each iteration would hold its conversations again."""
    if _converses(ctx):
        return None
    acc, by_cat, _ = validation_accuracy(ctx, opponent, k)
    return Validation(len(ctx.validation), acc, by_cat)


def validate(ctx: Context, version: str, k: int) -> Validation:
    """A target version's accuracy on the validation split (and, where it scores references,
    the loss of its reference answers): what steers the run, never the eval split."""
    acc, by_cat, by_turn = validation_accuracy(ctx, version, k)
    return Validation(len(ctx.validation), acc, by_cat, _reference_loss(ctx, version, ctx.validation), by_turn)


def validation_accuracy(ctx: Context, model: str, k: int) -> tuple[float, dict[str, float], list[float] | None]:
    """A model's accuracy on the validation split, per category, and per user turn in a
    conversation world (else None); its answers come through the generation cache."""
    if _converses(ctx):
        talks = converse(ctx.roster, ctx.store, [(p, [model]) for p in ctx.validation], k, "validation")
        return conversation_accuracy({p.id: t[0].messages for p, t in zip(ctx.validation, talks)}, ctx.validation,
                                     ctx.correct)
    answers = generate_cached(ctx.roster, ctx.store, model, ctx.validation, k, "validation")
    acc, by_cat = accuracy({pid: g.text for pid, g in answers.items() if g.ok}, ctx.validation, ctx.correct)
    return acc, by_cat, None


def _subset_boards(ctx: Context, k: int, reference_answers: dict[str, dict[str, str]]) -> dict[str, list[dict]]:
    """Elo on the eval split's diverse and hard subsets and their mix (WizardArena's test sets).
    The subsets are fixed the first time (from the opponents' answers) and kept in ratings/."""
    path = ctx.store.ratings_path("eval-subsets.json")
    subsets = read_json(path)
    if subsets is None:
        subsets = {"rules": SUBSET_RULES, "prompt_ids": eval_subsets(ctx.eval_split, reference_answers, ctx.correct)}
        atomic_write_json(path, subsets)
    every = ctx.store.judged(None, "eval")
    boards = {}
    for name, ids in subsets["prompt_ids"].items():
        chosen = set(ids)
        rows = [r for r in every if r.battle.prompt_id in chosen]
        boards[name] = [x.to_dict() for x in board(rows, ctx.cfg.rating, ctx.cfg.evaluate.bootstrap_seed)]
    atomic_write_json(ctx.store.ratings_path(f"{iter_name(k)}-subsets.json"), boards)
    return boards
