"""Rewards for reinforcement learning, made of the flywheel's own judges (``train.rl.reward``).

Each builder returns a scorer (``flywheel.learning.rl.Scorer``): ``(prompts, completions, columns) ->
[(reward, error)]``, one per answer. ``columns`` are the GRPO prompts' dataset columns
(``reference``, ``category``, ``baseline``, ``baseline_model``, ...). A reward that cannot be
given (no reference, an API error, an unparseable verdict) is ``(None, why)``: recorded and
left out of training, never scored 0.

In a conversation a prompt may be a later user turn: its ``history`` column holds the messages
before it (JSON, each user turn with its reference) and ``baseline_conversation`` the baseline's
conversation up to its answer to that turn. The verifier checks the answer against the turn's own
``reference``; the judge judges both whole conversations, as in battles; a reward model reads the
history before the turn.
"""

from __future__ import annotations

from collections.abc import Callable

from flywheel.ground.chat import prompt_as_read
from flywheel.ground.conversation import Message, decode, plain
from flywheel.learning.rl import Scored, Scorer
from judges.build import build_verifier
from judges.pairwise import PairwiseJudge, conversation_pair, pair_battle
from judges.reward_scorer import RewardScorer
from judges.verifier import VerifierJudge, load_callable

# What a pairwise verdict is worth to the answer in seat A (the target's).
VERDICT_REWARD = {"model_a": 1.0, "tie": 0.5, "model_b": 0.0, "tie (bothbad)": 0.0}


def verifier_reward(verifier: VerifierJudge) -> Scorer:
    """The verifier's score of each answer against its prompt's reference (1 right, 0 wrong, or
    a callable check's score in [0, 1])."""

    def score(prompts: list[str], completions: list[str], columns: dict[str, list]) -> list[Scored]:
        refs = columns.get("reference") or [None] * len(completions)
        out: list[Scored] = []
        for text, ref in zip(completions, refs):
            if ref is None:
                out.append((None, "no reference answer"))
                continue
            try:
                out.append((verifier.score(text, ref), None))
            except Exception as e:  # noqa: BLE001 - a user check that raises or scores outside 0 to 1: no reward
                out.append((None, f"check failed: {e!r}"))
        return out

    return score


def judge_reward(judge: PairwiseJudge, target: str) -> Scorer:
    """The run's judge on (the answer, the prompt's baseline answer: the best opponent's from the
    battle log), the answer in seat A: 1 a win, 0.5 a tie, 0 a loss or both bad. After a
    conversation's earlier turns it judges the two whole conversations (the history then the
    answer; the baseline's conversation), as it judges battles. The judge judges both orders
    where ``judge.both_orders`` says so, caches its verdicts, and its paid calls count against
    the run's budget, as in the judge stage."""

    def score(prompts: list[str], completions: list[str], columns: dict[str, list]) -> list[Scored]:
        n = len(completions)
        base = columns.get("baseline") or [None] * n
        base_model = columns.get("baseline_model") or ["baseline"] * n
        refs = columns.get("reference") or [None] * n
        cats = columns.get("category") or [""] * n
        history = columns.get("history") or [""] * n
        theirs = columns.get("baseline_conversation") or [""] * n
        todo = [i for i in range(n) if base[i] is not None and (not history[i] or theirs[i])]

        def battle(i: int):
            if not history[i]:
                return pair_battle(prompts[i], completions[i], base[i], reference=refs[i], category=cats[i] or "",
                                   model_a=target, model_b=base_model[i] or "baseline")
            mine = [*decode(history[i]), _user(prompts[i], refs[i]), {"role": "assistant", "content": completions[i]}]
            return conversation_pair(mine, decode(theirs[i]), cats[i] or "", target, base_model[i] or "baseline")

        battles = [battle(i) for i in todo]
        out: list[Scored] = [(None, "no baseline answer for this prompt")] * n
        for i, j in zip(todo, judge.judge(battles) if battles else []):
            out[i] = (VERDICT_REWARD[j.winner], None) if j.valid and j.winner in VERDICT_REWARD else \
                (None, j.error or f"no verdict ({j.winner})")
        return out

    return score


def _user(text: str, reference: str | None) -> Message:
    return {"role": "user", "content": text, **({"reference": reference} if reference is not None else {})}


def model_reward(scorer: RewardScorer) -> Scorer:
    """A reward model's score of each (prompt, answer): ``scorer.score(prompts, completions)``. A
    later turn of a conversation is read after its history, as the reward model's pairs are
    trained: the conversation through its chat template, else the raw text of the earlier turns
    (``flywheel.ground.chat.raw_prompt``)."""
    chat = bool(getattr(scorer, "chat", False))

    def score(prompts: list[str], completions: list[str], columns: dict[str, list]) -> list[Scored]:
        history = columns.get("history") or [""] * len(prompts)
        read = [prompt_as_read(p, plain(decode(h)), chat, None) if h else p for p, h in zip(prompts, history)]
        return [(float(x), None) for x in scorer.score(read, completions)]

    return score


def function_reward(spec: str) -> Scorer:
    """A user's ``module:function(prompts, completions, **columns) -> list[float | None]`` (TRL's
    reward-function contract); None, or a value that is not a number, is no reward."""
    fn: Callable = load_callable(spec)

    def score(prompts: list[str], completions: list[str], columns: dict[str, list]) -> list[Scored]:
        out: list[Scored] = []
        for x in fn(prompts=prompts, completions=completions, **columns):
            if isinstance(x, bool) or not isinstance(x, (int, float)):
                out.append((None, f"{spec} gave no number: {x!r}"[:200]))
            else:
                out.append((float(x), None))
        return out

    return score


def build_reward(rl, judge_cfg, judge: PairwiseJudge, target: str, reward_model: str | None = None) -> Scorer:
    """The scorer ``train.rl.reward`` names: the verifier (``judge.verifier``'s settings), the run's
    judge (the same object the judge stage uses: one cache, one budget), a reward model (at
    ``reward_model``, else ``train.rl.reward_model``), or a user's function."""
    if rl.reward == "verifier":
        return verifier_reward(build_verifier(judge_cfg.verifier))
    if rl.reward == "judge":
        return judge_reward(judge, target)
    if rl.reward == "reward_model":
        path = rl.reward_model or reward_model
        if path is None:
            raise ValueError("train.rl.reward reward_model: no reward model (train.rl.reward_model, or an earlier "
                             "iteration with train.method reward)")
        return model_reward(RewardScorer(path))
    return function_reward(rl.reward)
