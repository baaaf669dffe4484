"""The reward-model judge (``judge.kind: reward_model``): a reward model scores both answers of a
battle, and the higher score wins.

The reward model is one trained by a run (``train.method: reward``, saved under
``<run>/reward-models/<target>@<k>``) or any sequence-classification checkpoint with one output
(``judges.reward_scorer.RewardScorer``). Each answer is scored on its own, so the seat
an answer sits in cannot matter: there is no position bias to cancel and ``flip`` stays None.

The margin is the Bradley-Terry confidence beyond a coin flip, ``|2 * sigmoid(r_a - r_b) - 1|``
in [0, 1): 0 for equal scores, 0.46 when the model gives the winner a 73% chance (scores one
apart), near 1 when it is sure. A margin below ``tie_margin`` is a ``tie``. ``score_a`` and
``score_b`` are the raw rewards.

A battle that failed, or where an answer is empty, gets an invalid judgment: the reward model was
never trained on an empty answer (curation drops them), so its score for one means nothing.
"""

from __future__ import annotations

import math
from pathlib import Path

from flywheel.config.parts import JudgeConfig
from flywheel.ground.records import Battle, Judgment
from judges.pairwise import PairwiseJudge
from judges.reward_scorer import RewardScorer


def bt_margin(reward_a: float, reward_b: float) -> float:
    """``|2 * sigmoid(reward_a - reward_b) - 1|``: how much more than a coin flip the reward model
    trusts its verdict (``tanh`` of half the difference)."""
    return abs(math.tanh((reward_a - reward_b) / 2))


class RewardModelJudge(PairwiseJudge):
    """Scores both answers of each battle with the reward model at ``path``; the higher wins, a
    margin (``bt_margin``) below ``tie_margin`` is a tie.

    ``chat``: read battles as conversations (the prompt a user turn, the answer the assistant's)
    through the model's chat template, as a chat target's pairs are trained; None: when its
    tokenizer has a chat template (else raw text). ``device``, ``batch_size``, ``dtype``: the
    ``RewardScorer``'s."""

    def __init__(self, path: str | Path, tie_margin: float = 0.02, device: str = "auto", batch_size: int = 64,
                 dtype: str = "auto", chat: bool | None = None) -> None:
        if not 0 <= tie_margin < 1:
            raise ValueError(f"tie_margin {tie_margin}: expected 0 <= tie_margin < 1")
        self.scorer = RewardScorer(path, device=device, batch_size=batch_size, dtype=dtype)
        self.name = f"reward_model:{Path(path).name}"
        self.tie_margin = tie_margin
        self.chat = self.scorer.chat if chat is None else chat

    @classmethod
    def from_config(cls, jc: JudgeConfig) -> RewardModelJudge:
        """The judge a ``judge:`` section of kind reward_model describes: its model and tie margin."""
        return cls(jc.reward_model, tie_margin=jc.reward_tie_margin)  # type: ignore[arg-type]  # checked: set

    def _prompt(self, text: str):
        return [{"role": "user", "content": text}] if self.chat else text

    def judge(self, battles: list[Battle]) -> list[Judgment]:
        out: list[Judgment | None] = [None] * len(battles)
        todo = []
        for i, b in enumerate(battles):
            if not b.ok:
                out[i] = Judgment(b.battle_id, self.name, None, 0.0, error=f"battle failed: {b.error}")
            elif not b.response_a.strip() or not b.response_b.strip():
                seats = [s for s, r in (("a", b.response_a), ("b", b.response_b)) if not r.strip()]
                out[i] = Judgment(b.battle_id, self.name, None, 0.0, error=f"empty response ({', '.join(seats)})")
            else:
                todo.append(i)
        prompts = [self._prompt(battles[i].prompt) for i in todo]
        scores = self.scorer.score(prompts + prompts, [battles[i].response_a for i in todo]
                                   + [battles[i].response_b for i in todo])
        for n, i in enumerate(todo):
            ra, rb = scores[n], scores[len(todo) + n]
            margin = bt_margin(ra, rb)
            winner = "tie" if margin < self.tie_margin or ra == rb else "model_a" if ra > rb else "model_b"
            out[i] = Judgment(battles[i].battle_id, self.name, winner, 0.0 if winner == "tie" else margin,
                              score_a=ra, score_b=rb, raw=f"reward_a={ra:.6g} reward_b={rb:.6g}")
        return out  # type: ignore[return-value]  # every slot filled
