"""The judge cascade (``judge.kind: cascade``, judges/cascade.py) against one judge for every battle:
the same battles judged by a strong judge alone, a cheap judge alone, and cheap -> strong cascades.

The world is the embedded task suite, so the truth is known: a battle's true verdict is the
verifier's (the right answer wins; both right or both wrong is a tie). Its contestants answer like
a flywheel's target and its opponents: a student (right 45% of the time) against calc (90% on
arithmetic, 20% on strings), scribe (the reverse) and generalist (60%), drawn evenly; a wrong
answer is the reference altered (two wrong answers mostly differ).

The judges serve on a loopback OpenAI-compatible server in a process of its own, and are reached
through the openai SDK as the players are (``LLMJudge``, both orders, Arena-Hard's template). Each
is a ``tests.fakeapi.NoisyJudge``: it misreads a battle with probability ``noise`` (the same in both
orders), prefers seat A with probability ``flip`` per order, and returns log-probabilities whose
verdict token is its confidence (higher when it read right). The cheap judge: ``--cheap-noise``
0.25, ``--cheap-flip`` 0.1, ``--cheap-latency`` 10 ms; the strong one: ``--strong-noise`` 0.05, no
flip, ``--strong-latency`` 50 ms, at ``--price-ratio`` 20x the cheap one's price per token. Cost is
metered per call (tokens x price, as ``usage.jsonl`` counts it); no arm reads another's cache.

Arms, side by side on each seed's battles: ``strong`` alone (both orders: what Arena-Hard and
AlpacaEval do today), ``strong, one order`` (``second_order: when_unsure`` without a threshold: one
order per battle, its seats drawn per battle), ``cheap`` alone;
``cascade`` cheap -> strong at each of ``--thresholds`` with ties escalated (the default) and with
confident, consistent ties decided; and ``chosen``, the cascade whose threshold and tie rule were
chosen on the validation split (``judges.cascade_report.choose_thresholds``: the least cost
reaching ``--target`` agreement with the strong judge, 0.95) of the suite drawn with
``--calibration-seed`` (100), with contestants and judge draws of its own, twice: its strong tier
judging both orders, and judging one order (``second_order: when_unsure``, no threshold).
Every cascade audits 5% of the cheap judge's decisions with the strong judge (paid for).

Columns: accuracy against the truth (an invalid verdict is wrong; a tie and "both bad" agree),
agreement with the strong judge's verdicts, cost (USD), cost per decisive verdict (a win, not a tie),
the share the cheap tier escalated, and seconds.

Which seeds report: ``--seeds`` (10, 11, 12: registered as held out in benchmarks/worlds.yaml,
world ``judge_battles``, before they ran; seeds 0-2 steered the target and the strong tier's orders
and are tuning seeds now). The threshold and tie rule of ``chosen`` come from the validation split of
``--calibration-seed``; the fixed thresholds are set in advance. Per seed: ``strong``'s cost / the
last ``chosen``'s (strong tier in one order), and whether its accuracy is at least 95%
of ``strong``'s. The last line is ``ratio: X``, the median of that cost ratio over the seeds (the
goal: X >= 3, each seed meeting the 95% condition). ``--strong-flip`` gives the strong judge a
position bias, which one order per battle leaves unchecked.

    python -m benchmarks.judge_cascade                      # 3 seeds x 400 battles (about 1.5 minutes)
    python -m benchmarks.judge_cascade --strong-flip 0.1    # the strong judge prefers seat A 10% of the time
    python -m benchmarks.judge_cascade --seeds 0 --battles 100 --calibration-battles 100   # quick

Does the embedded flywheel learn as well with the cascade as with the strong judge alone? ``--serve``
keeps the two judges up on 127.0.0.1:8701 (cheap) and :8702 (strong) for runs of
``benchmarks.efficacy`` (3 seeds each, hours on a CPU), whose final accuracies are then compared
(the cascade's within the strong judge's 95% CI):

    python -m benchmarks.judge_cascade --serve &
    J='{kind: openai, max_new_tokens: 64, max_concurrency: 32'
    python -m benchmarks.efficacy --seeds 0,1,2 --set judge.kind=llm \
        --set "judge.player=$J, name: strong, model: strong-judge, base_urls: ['http://127.0.0.1:8702/v1']}"
    python -m benchmarks.efficacy --seeds 0,1,2 --set judge.kind=cascade --set "judge.cascade.tiers=[
        {kind: llm, price: 0.0008, threshold: 0.7, ties: decide, player: $J, name: cheap, model: cheap-judge,
         base_urls: ['http://127.0.0.1:8701/v1']}},
        {kind: llm, price: 0.016, second_order: when_unsure, player: $J, name: strong, model: strong-judge,
         base_urls: ['http://127.0.0.1:8702/v1']}}]"

(the threshold and tie rule: those ``chosen`` prints; the prices: its prices per battle.)
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import random
import statistics
import time
from dataclasses import dataclass

from benchmarks.stats import parse_seeds
from benchmarks.worlds import standing
from flywheel.ground.records import SCORE_A, Battle, Judgment, Prompt, stable_id
from flywheel.ground.reports import text_table
from flywheel.players import create_player
from flywheel.players.api import RetryPolicy
from flywheel.worlds.tasks import build_suite, take_validation
from judges.cascade import CascadeJudge, Tier, cascade_of
from judges.cascade_report import choose_thresholds
from judges.llm import LLMJudge
from judges.pairwise import PairwiseJudge
from judges.verifier import VerifierJudge
from tests.fakeapi import FakeAPI, NoisyJudge

ARITHMETIC = ("add", "sub", "mul")
# Each contestant's chance of a right answer: (on arithmetic, on strings).
SKILL = {"student": (0.45, 0.45), "calc": (0.9, 0.2), "scribe": (0.2, 0.9), "generalist": (0.6, 0.6)}
PRICE_IN, PRICE_OUT = 0.5, 1.5  # the cheap judge's USD per million tokens (the strong one's: x price ratio)
AUDIT = 0.05


def answer(rng: random.Random, p: Prompt, player: str) -> str:
    """``player``'s answer to ``p``: the reference with its skill's probability, else an altered one."""
    skill = SKILL[player][0 if p.category in ARITHMETIC else 1]
    ref = p.reference or ""
    return ref if rng.random() < skill else ref + str(rng.randint(1, 9))


def make_battles(prompts: list[Prompt], seed: int, n: int) -> list[Battle]:
    """``n`` battles of the student against an opponent drawn evenly, on prompts drawn from ``prompts``."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        p, opponent = rng.choice(prompts), rng.choice(["calc", "scribe", "generalist"])
        a, b = ("student", opponent) if rng.random() < 0.5 else (opponent, "student")
        ra, rb = answer(rng, p, a), answer(rng, p, b)
        bid = stable_id("bench", seed, i)
        out.append(Battle(bid, 1, "train", p.id, p.text, p.category, p.level, p.reference, a, b, ra, rb))
    return out


@dataclass(frozen=True)
class Arm:
    name: str
    accuracy: float
    agreement: float
    cost_usd: float
    per_decisive_usd: float | None
    escalated: float | None
    seconds: float

    def row(self) -> dict:
        return {"arm": self.name, "accuracy": round(self.accuracy, 4), "agreement": round(self.agreement, 4),
                "cost_usd": round(self.cost_usd, 4), "per_decisive_usd": self.per_decisive_usd or "-",
                "escalated": "-" if self.escalated is None else round(self.escalated, 3), "seconds": round(self.seconds, 1)}


SERVE_PORTS = (8701, 8702)  # --serve: the cheap judge's port, the strong one's


def serve(args, out, stop, ports: tuple[int, int] = (0, 0)) -> None:
    """The two judges' servers (one process), until ``stop`` is set."""
    with FakeAPI("script", delay_s=args.cheap_latency, port=ports[0]) as cheap, \
            FakeAPI("script", delay_s=args.strong_latency, port=ports[1]) as strong:
        cheap.script = NoisyJudge(args.cheap_noise, args.cheap_flip, seed=1)
        strong.script = NoisyJudge(args.strong_noise, args.strong_flip, seed=2)
        out.put((cheap.url, strong.url))
        stop.wait()


class Judges:
    """Fresh LLM judges on the two servers (each arm its own players: its own calls, its own cost)."""

    def __init__(self, urls: tuple[str, str], args) -> None:
        self.urls, self.args = urls, args

    def make(self, which: str, confidence: bool = False, second_order: str = "always") -> LLMJudge:
        strong = which == "strong"
        ratio = self.args.price_ratio if strong else 1.0
        player = create_player("openai", which, model=f"{which}-judge", base_urls=[self.urls[strong]],
                               max_concurrency=self.args.concurrency, retry=RetryPolicy(2, 0.05, 1.0),
                               price_input_per_mtok=PRICE_IN * ratio, price_output_per_mtok=PRICE_OUT * ratio)
        return LLMJudge(player, max_new_tokens=64, confidence=confidence, second_order=second_order)


def spent(judge: PairwiseJudge) -> float:
    return sum(j.player.usage.cost_usd for j in judge.llm_judges())


def same(a: str | None, b: str | None) -> bool:
    return a is not None and b is not None and SCORE_A[a] == SCORE_A[b]


def run_arm(name: str, judge: PairwiseJudge, battles: list[Battle], truth: list[str | None],
            strong: list[str | None] | None) -> tuple[Arm, list[Judgment]]:
    t0 = time.perf_counter()
    js = judge.judge(battles)
    seconds = time.perf_counter() - t0
    winners = [j.winner for j in js]
    cost = spent(judge)
    decisive = sum(1 for w in winners if w in ("model_a", "model_b"))
    records = [cascade_of(j) for j in js]
    escalated = (sum(1 for r in records if r and r["tier"] > 0) / len(js)) if records and records[0] else None
    arm = Arm(name, sum(map(same, winners, truth)) / len(js), sum(map(same, winners, strong or winners)) / len(js),
              cost, round(cost / decisive, 6) if decisive else None, escalated, seconds)
    return arm, js


def cascade(judges: Judges, threshold: float | None, ties: bool, prices: tuple[float, float],
            strong_orders: str = "always") -> CascadeJudge:
    """cheap -> strong; ``strong_orders``: the strong tier's ``second_order``."""
    return CascadeJudge([Tier(judges.make("cheap", confidence=threshold is not None), prices[0], threshold, ties),
                         Tier(judges.make("strong", second_order=strong_orders), prices[1])],
                        audit_share=AUDIT, audit_seed=0)


def calibrate(judges: Judges, args) -> tuple[tuple[float | None, bool], tuple[float, float], float, float]:
    """The cheap tier's (threshold, escalate ties) chosen on the calibration seed's validation split;
    the judges' prices per battle measured there; the agreement and cost per battle it reached."""
    train, _ = build_suite(args.calibration_seed, 40, 0)
    _, validation = take_validation(train, 10)
    battles = make_battles(validation, args.calibration_seed, args.calibration_battles)
    tiers = [judges.make("cheap", confidence=True), judges.make("strong")]
    every = [t.judge(battles) for t in tiers]
    prices = (spent(tiers[0]) / len(battles), spent(tiers[1]) / len(battles))
    choice = choose_thresholds(battles, every, [Tier(t, p) for t, p in zip(tiers, prices)], args.target,
                               [x / 100 for x in range(50, 100, 2)])
    return (choice.thresholds[0], choice.escalate_ties[0]), prices, choice.agreement, choice.cost_per_battle


def one_seed(seed: int, args, judges: Judges, chosen: tuple[float | None, bool],
             prices: tuple[float, float]) -> list[Arm]:
    train, _ = build_suite(seed, 40, 0)
    battles = make_battles(take_validation(train, 10)[0], seed, args.battles)
    truth = [j.winner for j in VerifierJudge().judge(battles)]
    strong, strong_js = run_arm("strong", judges.make("strong"), battles, truth, None)
    said = [j.winner for j in strong_js]
    arms = [strong, run_arm("strong, one order", judges.make("strong", second_order="when_unsure"),
                            battles, truth, said)[0],
            run_arm("cheap", judges.make("cheap"), battles, truth, said)[0]]
    for threshold in args.thresholds:
        for ties in (True, False):
            name = f"cascade t={threshold:g} ties {'escalate' if ties else 'decide'}"
            arms.append(run_arm(name, cascade(judges, threshold, ties, prices), battles, truth, said)[0])
    t, ties = chosen
    name = f"t={'-' if t is None else f'{t:g}'}, ties {'escalate' if ties else 'decide'}"
    arms.append(run_arm(f"chosen ({name}), strong both orders", cascade(judges, t, ties, prices), battles, truth,
                        said)[0])
    arms.append(run_arm(f"chosen ({name}), strong one order",
                        cascade(judges, t, ties, prices, "when_unsure"), battles, truth, said)[0])
    return arms


def serve_forever(args) -> None:
    """The two judges' servers until Ctrl-C or a plain ``kill`` (SIGTERM), which stop them too: a
    server process left behind would keep the ports."""
    import signal

    def interrupt(*_: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    ctx = mp.get_context("fork")
    urls, stop = ctx.Queue(), ctx.Event()
    proc = ctx.Process(target=serve, args=(args, urls, stop, SERVE_PORTS), daemon=True)
    proc.start()
    try:
        cheap, strong = urls.get(timeout=60)
        print(f"cheap judge: {cheap}  strong judge: {strong}  (Ctrl-C or kill ends them)", flush=True)
        proc.join()
    except KeyboardInterrupt:
        stop.set()
        proc.join(timeout=10)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", nargs="+", default=["10,11,12"])
    ap.add_argument("--battles", type=int, default=400, help="battles per seed")
    ap.add_argument("--calibration-seed", type=int, default=100)
    ap.add_argument("--calibration-battles", type=int, default=400)
    ap.add_argument("--target", type=float, default=0.95, help="agreement with the strong judge 'chosen' must reach")
    ap.add_argument("--thresholds", type=float, nargs="+", default=[0.6, 0.8])
    ap.add_argument("--cheap-noise", type=float, default=0.25)
    ap.add_argument("--cheap-flip", type=float, default=0.1)
    ap.add_argument("--strong-noise", type=float, default=0.05)
    ap.add_argument("--strong-flip", type=float, default=0.0, help="the strong judge's position bias (per order)")
    ap.add_argument("--price-ratio", type=float, default=20.0)
    ap.add_argument("--cheap-latency", type=float, default=0.01, help="seconds per call")
    ap.add_argument("--strong-latency", type=float, default=0.05, help="seconds per call")
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--serve", action="store_true", help=f"only serve the two judges on ports {SERVE_PORTS} until "
                    "interrupted (for flywheel runs)")
    args = ap.parse_args()
    if args.serve:
        return serve_forever(args)
    seeds = parse_seeds(args.seeds)
    if args.calibration_seed in seeds:
        raise SystemExit("--calibration-seed: choose on a seed that does not report")
    ctx = mp.get_context("fork")
    out, stop = ctx.Queue(), ctx.Event()
    proc = ctx.Process(target=serve, args=(args, out, stop), daemon=True)
    proc.start()
    try:
        judges = Judges(out.get(timeout=60), args)
        chosen, prices, agreement, per_battle = calibrate(judges, args)
        print(f"chosen on the validation split of seed {args.calibration_seed} ({args.calibration_battles} battles, "
              f"target agreement {args.target}): threshold {chosen[0]}, ties {'escalate' if chosen[1] else 'decide'} "
              f"(agreement {agreement:.3f}, ${per_battle:.6f} per battle); prices per battle: cheap ${prices[0]:.6f}, "
              f"strong ${prices[1]:.6f}")
        ratios, held = [], []
        for seed in seeds:
            arms = one_seed(seed, args, judges, chosen, prices)
            print(f"\nseed {seed}: {args.battles} battles ({standing(('judge_battles', seed, None, None, None))})\n"
                  + text_table([a.row() for a in arms], list(arms[0].row())))
            strong, one_order, pick = arms[0], arms[1], arms[-1]
            ratios.append(strong.cost_usd / pick.cost_usd)
            held.append(pick.accuracy >= 0.95 * strong.accuracy)
            print(f"strong cost / chosen cost: {ratios[-1]:.2f} (strong in one order / chosen: "
                  f"{one_order.cost_usd / pick.cost_usd:.2f}); chosen accuracy {pick.accuracy:.3f} "
                  f"{'>=' if held[-1] else '<'} 95% of strong's {strong.accuracy:.3f}")
    finally:
        stop.set()
        proc.join(timeout=10)
    print(f"\nchosen met 95% of the strong judge's accuracy on {sum(held)} of {len(held)} seed(s); cost ratios "
          f"{', '.join(f'{r:.2f}' for r in ratios)}")
    print(f"ratio: {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
