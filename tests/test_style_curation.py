"""curate.style_control under a judge that prefers the longer answer (an LLM judge on a loopback
server): without the setting the SFT rows grow longer iteration after iteration, with it they do
not; and where the judge has no taste for length almost nothing is refused."""

from __future__ import annotations

import random

import pytest

from flywheel.config.tree import CurateConfig
from flywheel.ground.records import Battle
from flywheel.ground.style import style_of
from flywheel.learning.curation import curate
from flywheel.learning.style_filter import style_explained
from flywheel.players.api import RetryPolicy
from flywheel.players.registry import create_player
from judges.llm import LLMJudge
from tests.fakeapi import FakeAPI, fenced_blocks, solve

BATTLES = 100
FILLER = "well let me think about this carefully and explain every step of it".split()


@pytest.fixture(autouse=True)
def key(monkeypatch):
    monkeypatch.setenv("FLYWHEEL_TEST_KEY", "fake-test-key-0123456789abcdefghij")


def judge_on(server) -> LLMJudge:
    player = create_player("openai", "judge", model="judge-1", base_urls=[server.url], api_key_env="FLYWHEEL_TEST_KEY",
                           retry=RetryPolicy(max_retries=1, backoff_s=0.01, max_backoff_s=1), max_concurrency=8)
    return LLMJudge(player, max_new_tokens=64)


def longer_wins(prompt: str) -> str:
    """A judge with a taste for length: the longer answer wins, whatever it says."""
    blocks = fenced_blocks(prompt)
    a, b = style_of(blocks["ANSWER A"]).tokens, style_of(blocks["ANSWER B"]).tokens
    return f"Thorough answers are better.\n[[{'A>B' if a > b else 'B>A' if b > a else 'A=B'}]]"


def right_wins(prompt: str) -> str:
    """A judge without it: the right answer wins, the length of either says nothing."""
    blocks = fenced_blocks(prompt)
    ref = solve(blocks["QUESTION"])
    a_ok, b_ok = (blocks[s].split()[-1] == ref for s in ("ANSWER A", "ANSWER B"))
    return f"Checked.\n[[{'A>B' if a_ok and not b_ok else 'B>A' if b_ok and not a_ok else 'A=B'}]]"


def padded(answer: str, rng: random.Random) -> str:
    """An answer after 0-5 filler words (the final word is the answer)."""
    return " ".join(FILLER[: rng.randint(0, 5)] + [answer])


def battles_of(iteration: int, repertoire: list[int], rng: random.Random) -> list[Battle]:
    """``BATTLES`` battles of the target (answers padded as often as its repertoire says: what it learnt)
    against an opponent whose padding is uniform; both right half the time."""
    out = []
    for i in range(BATTLES):
        x, y = rng.randint(10, 99), rng.randint(10, 99)
        prompt, ref = f"{x}+{y}=", str(x + y)
        ans = lambda: ref if rng.random() < 0.5 else str(x + y + 1)  # noqa: E731
        mine = " ".join(FILLER[: rng.choice(repertoire)] + [ans()])
        theirs = padded(ans(), rng)
        seats = (f"student@{iteration - 1}", "calc")
        a, b = (seats, (mine, theirs)) if i % 2 else (seats[::-1], (theirs, mine))
        out.append(Battle(f"{iteration}-{i}", iteration, "train", f"p{i}", prompt, "add", 1, ref, a[0], a[1], *b))
    return out


def imitate(judge: LLMJudge, cfg: CurateConfig, iterations: int = 3) -> list[float]:
    """Each iteration the target pads its answers as its last SFT rows did (a target that learns
    its data exactly): the mean padding of the SFT rows, iteration by iteration."""
    rng = random.Random(0)
    repertoire = list(range(6))  # at first, 0-5 filler words as often each
    means = []
    for k in range(1, iterations + 1):
        battles = battles_of(k, repertoire, rng)
        judgments = {j.battle_id: j for j in judge.judge(battles)}
        rows = curate(battles, judgments, ["student"], set(), cfg).sft
        assert rows, f"iteration {k}: no SFT rows at all"
        pads = [len(r.completion.split()) - 1 for r in rows]
        means.append(sum(pads) / len(pads))
        repertoire = pads
    return means


def test_a_length_loving_judge_makes_the_data_drift_longer_unless_style_is_controlled():
    with FakeAPI("script") as server:
        server.script = longer_wins
        judge = judge_on(server)
        plain = imitate(judge, CurateConfig())
        controlled = imitate(judge, CurateConfig(style_control=True))
    # Without the setting: every iteration's rows are longer than the last (from 2.5 words of padding).
    assert plain[0] > 3.0 and plain[1] > plain[0] and plain[2] > plain[1], plain
    # With it: no upward drift (the wins the length explains are refused; the ties remain, whose
    # padding is the target's own: a random walk around the 2.5 words it started from).
    assert max(controlled) <= 3.0 and controlled[-1] <= controlled[0] + 0.5, controlled
    assert plain[-1] - controlled[-1] > 1.5


def test_a_judge_without_a_taste_for_length_loses_almost_no_data():
    rng = random.Random(1)
    with FakeAPI("script") as server:
        server.script = right_wins
        judge = judge_on(server)
        battles = battles_of(1, list(range(6)), rng) + battles_of(2, list(range(6)), rng)
        judgments = {j.battle_id: j for j in judge.judge(battles)}
    styled = style_explained(battles, judgments, CurateConfig().style_tolerance)
    decisive = sum(j.winner in ("model_a", "model_b") for j in judgments.values())
    assert decisive >= 50 and styled.credible == () and not styled.explained, styled
    cur = curate(battles, judgments, ["student"], set(), CurateConfig(style_control=True))
    assert cur.dropped["style"] == len(styled.explained) and cur.style == styled.coefficients


def test_style_control_in_a_games_world_is_refused_by_name():
    from pathlib import Path

    from flywheel.config.loading import ConfigError, load_config

    recipe = Path(__file__).parents[1] / "flows" / "recipes" / "tictactoe.yaml"
    with pytest.raises(ConfigError) as e:
        load_config(recipe, ["curate.style_control=true"])
    assert "curate.style_control" in str(e.value)
    assert load_config(None, ["curate.style_control=true"]).curate.style_control
