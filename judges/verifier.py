"""A programmatic judge for prompts with a reference answer: exact match decides."""

from __future__ import annotations

from flywheel.records import Battle, Judgment
from judges.base import PairwiseJudge


def normalize(text: str) -> str:
    """Whitespace-insensitive form of an answer."""
    return " ".join(text.split())


class VerifierJudge(PairwiseJudge):
    """Right beats wrong; both right is ``tie``; both wrong is ``tie (bothbad)``."""

    name = "verifier"

    def judge(self, battles: list[Battle]) -> list[Judgment]:
        out = []
        for b in battles:
            if b.reference is None:
                out.append(Judgment(b.battle_id, self.name, None, 0.0, error="no reference answer"))
                continue
            ref = normalize(b.reference)
            a_ok = normalize(b.response_a) == ref
            b_ok = normalize(b.response_b) == ref
            if a_ok and b_ok:
                winner = "tie"
            elif not a_ok and not b_ok:
                winner = "tie (bothbad)"
            else:
                winner = "model_a" if a_ok else "model_b"
            out.append(
                Judgment(
                    b.battle_id,
                    self.name,
                    winner,
                    margin=1.0 if winner in ("model_a", "model_b") else 0.0,
                    score_a=float(a_ok),
                    score_b=float(b_ok),
                    raw=f"a_correct={a_ok} b_correct={b_ok}",
                )
            )
        return out
