"""benchmarks/judge_cascade.py measures what it reports: its battles' truth and its judges' known
noise, and a short run end to end through the loopback judges."""

import subprocess
import sys

from benchmarks.judge_cascade import make_battles
from flywheel.worlds.tasks import build_suite
from judges.verifier import VerifierJudge
from tests.fakeapi import NoisyJudge


def test_the_battles_mix_wins_and_ties_and_the_noisy_judge_misreads_as_often_as_told():
    prompts = build_suite(0, 40, 0)[0]
    battles = make_battles(prompts, 0, 600)
    truth = [j.winner for j in VerifierJudge().judge(battles)]
    share = {w: truth.count(w) / len(truth) for w in set(truth)}
    assert 0.35 < share["model_a"] + share["model_b"] < 0.65 and share["tie"] > 0.1 and share["tie (bothbad)"] > 0.05
    judge = NoisyJudge(0.25, seed=3)
    misread = 0
    decisive = [(b, t) for b, t in zip(battles, truth) if t in ("model_a", "model_b")]
    for b, t in decisive:
        prompt = (f"###-x QUESTION\n{b.prompt}\n###-x END QUESTION\n###-x ANSWER A\n{b.response_a}\n"
                  f"###-x END ANSWER A\n###-x ANSWER B\n{b.response_b}\n###-x END ANSWER B\n")
        said = judge(prompt)[0]
        misread += ("[[A>B]]" in said) != (t == "model_a") or "[[A=B]]" in said
    assert 0.18 < misread / len(decisive) < 0.32


def test_a_short_run_prints_every_arm_side_by_side_and_ends_with_the_ratio():
    out = subprocess.run([sys.executable, "-m", "benchmarks.judge_cascade", "--seeds", "0", "--battles", "40",
                          "--calibration-battles", "40", "--thresholds", "0.7"], capture_output=True, text=True,
                         timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.strip().splitlines()
    assert lines[-1].startswith("ratio: ") and float(lines[-1].split()[1]) > 0
    assert lines[0].startswith("chosen on the validation split of seed 100")
    for arm in ("strong ", "cheap ", "cascade t=0.7 ties escalate", "cascade t=0.7 ties decide", "chosen ("):
        assert any(line.startswith(arm) for line in lines), arm
