"""The game judge (``judge.kind: game``): the rules decide each battle of the games world."""

from __future__ import annotations

import json

from flywheel.games.hanabi_referee import is_deal, replay_duplicate
from flywheel.games.referee import replay
from flywheel.ground.records import Battle, Judgment
from judges.pairwise import PairwiseJudge

WINNER = {"a": "model_a", "b": "model_b", "draw": "tie"}


class GameJudge(PairwiseJudge):
    """Replays every battle's record with the referee (flywheel/games/referee.py): a win is
    decisive (margin 1), a draw a tie, a record that is not a game an invalid judgment. ``raw``
    holds how the game ended and the illegal answers of each seat. A Hanabi battle (its prompt a
    deal) is a duplicate team battle (flywheel/games/hanabi_referee.py): the higher score wins,
    and ``raw`` holds both teams' scores."""

    name = "game"

    def judge(self, battles: list[Battle]) -> list[Judgment]:
        out = []
        for b in battles:
            if is_deal(b.prompt):
                out.append(self._duplicate(b))
                continue
            try:
                got = replay(b.prompt, b.response_a, b.response_b)
            except ValueError as e:
                out.append(Judgment(b.battle_id, self.name, None, 0.0, error=str(e)))
                continue
            raw = json.dumps({"result": got.reason, "moves": len(got.plies), "illegal": got.illegal})
            if got.winner is None:
                out.append(Judgment(b.battle_id, self.name, None, 0.0, raw=raw, error=got.reason))
            else:
                out.append(Judgment(b.battle_id, self.name, WINNER[got.winner],  # type: ignore[arg-type]
                                    0.0 if got.winner == "draw" else 1.0, raw=raw))
        return out

    def _duplicate(self, b: Battle) -> Judgment:
        try:
            got = replay_duplicate(b.prompt, b.response_a, b.response_b)
        except ValueError as e:
            return Judgment(b.battle_id, self.name, None, 0.0, error=str(e))
        raw = json.dumps({"result": got.reason, "scores": {"a": got.a.score, "b": got.b.score},
                          "illegal": {"a": got.a.illegal, "b": got.b.illegal}})
        if got.winner is None:
            return Judgment(b.battle_id, self.name, None, 0.0, raw=raw, error=got.reason)
        margin = 0.0 if got.winner == "draw" else 1.0
        return Judgment(b.battle_id, self.name, WINNER[got.winner], margin, raw=raw)  # type: ignore[arg-type]
