"""Hanabi: how far the curation's labels move when the rules also read the seat's own cards.

    python -m benchmarks.hanabi_labels --battles 240 --noise 0.3 --seed 0

Plays ``--battles`` duplicate battles of ``flows/recipes/hanabi.yaml``'s size, as the recipe's train
battles are: a target beside the cautious bot (in a seat drawn per battle) against the bot's own
team, on seeded deals. The target is the bot with noise: with probability ``--noise`` it makes a
random legal move instead of the bot's. Each battle is curated twice (``world.games.hanabi.labels``
``knowledge`` and ``hidden_card``, the bot a reference partner as in the recipe) and the rows are
compared view by view: how many SFT rows and DPO pairs each gives, how many are rule corrections,
how many of the bot's and the target's moves the rules call wrong, and in how many views the two
disagree (a different move learnt, a view learnt by one only).
Nothing is trained; a few seconds on one core.
"""

from __future__ import annotations

import argparse
import random

from flywheel.config.tree import GamesConfig
from flywheel.games.hanabi import Setup
from flywheel.games.hanabi_knowledge import fault, sight
from flywheel.games.hanabi_policy import cautious_move
from flywheel.games.hanabi_referee import new_deal, parse_deal, replay_team, seats
from flywheel.ground.records import Battle
from flywheel.learning.hanabi_curation import curate_hanabi
from judges.game import GameJudge

RECIPE = Setup(players=2, colours=3, ranks=4, hand=4)
BOT = "cautious"


def record(deal: str, seats: list[str], noise: float, rng: random.Random) -> str:
    """The moves of a team (a player per seat: the bot, or the noisy target ``t``) on ``deal``."""
    st, moves = parse_deal(deal), []
    while not st.over():
        bot = cautious_move(sight(st).view)
        noisy = seats[st.to_move] != BOT and rng.random() < noise
        moves.append(rng.choice(st.legal_moves()) if noisy else bot)
        st = st.play(moves[-1])
    return " ".join(moves)


def battles(n: int, noise: float, seed: int) -> list[Battle]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        deal = new_deal(RECIPE, rng)
        seats = ["t@1", BOT] if rng.random() < 0.5 else [BOT, "t@1"]
        out.append(Battle(f"b{i}", 1, "train", f"p{i}", deal, "hanabi", 0, None, "+".join(seats), BOT,
                          record(deal, seats, noise, rng), record(deal, [BOT, BOT], 0.0, rng), None, "hanabi/L0"))
    return out


def faults(played: list[Battle], labels: str) -> dict[str, tuple[int, int]]:
    """Per seat kind (``bot``, ``target``): the moves the rules call wrong, and the moves made."""
    out = {"bot": [0, 0], "target": [0, 0]}
    for b in played:
        for team, rec in ((b.model_a, b.response_a), (b.model_b, b.response_b)):
            who = seats(team, RECIPE.players)
            for ply in replay_team(b.prompt, rec).plies:
                row = out["bot" if who[ply.state.to_move] == BOT else "target"]
                row[0] += fault(ply.state, ply.move, labels) is not None
                row[1] += 1
    return {k: (v[0], v[1]) for k, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--battles", type=int, default=240, help="duplicate battles (the recipe plays 240 an iteration)")
    ap.add_argument("--noise", type=float, default=0.3, help="the target's share of random moves")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    played = battles(args.battles, args.noise, args.seed)
    verdicts = {v.battle_id: v for v in GameJudge().judge(played)}
    rows = {}
    for labels in ("knowledge", "hidden_card"):
        cur = curate_hanabi(played, verdicts, ["t"], set(), GamesConfig(games=["hanabi"], hanabi={"labels": labels}),
                            frozenset({BOT}))
        sft = {r.prompt: (r.completion, r.source_model) for r in cur.sft}
        rules = sum(r.source_model == "rules" for r in cur.sft)
        wrong = ", ".join(f"{kind} {n} of {of}" for kind, (n, of) in faults(played, labels).items())
        print(f"{labels:>11}: {len(cur.sft)} SFT rows ({rules} rule corrections), {len(cur.dpo)} DPO pairs; "
              f"moves the rules call wrong: {wrong}")
        rows[labels] = sft
    a, b = rows["knowledge"], rows["hidden_card"]
    moved = sum(a[v][0] != b[v][0] for v in a.keys() & b.keys())
    print(f"views learnt by both: {len(a.keys() & b.keys())}, a different move in {moved}; "
          f"by knowledge only: {len(a.keys() - b.keys())}; by hidden_card only: {len(b.keys() - a.keys())}")


if __name__ == "__main__":
    main()
