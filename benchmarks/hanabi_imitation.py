"""How well can a tiny model imitate the cautious Hanabi partner? An upper bound on what the Hanabi
recipe's curation can teach: supervised training on the bot's own moves alone.

Views come from games of the recipe's size (``flows/recipes/hanabi.yaml``: 2 seats, 3 colours,
ranks 1-4, hands of 4): half bot-and-bot, half bot-and-random (the random mover in seat 1, so that
the views cover positions a weaker partner leads to). Each view is labelled with the cautious
bot's move there (``flywheel/games/hanabi_policy.py``). Train views come from ``--games`` deals of
seed 0, held-out views from 150 deals of seed 1 (those also in train left out). Per model size
(``--sizes LAYERSxWIDTH``), the embedded world's character-level GPT is trained on the train views
with its own pre-training loop (AdamW, batch 64, ``--steps``). Two figures per model:

- the share of held-out views whose move it names exactly (teacher-forced, token by token);
- its score as the bot's partner: 40 deals of seed 2, the model in seat 0 then in seat 1 (80
  games, greedy answers; an answer that is not a legal move discards the oldest card), beside
  the bot's own self-play score on the same deals (mean +- 95% normal interval).

``--order`` renders the views as the game does (``fireworks-first``) or as it did before, for the
comparisons in docs/benchmarks/hanabi.md: ``unmarked``, fireworks first but
without the marks of playable cards (a card's mark is only what its seat was told, and ``++`` never
stands for a card of mine that I know is playable); ``fireworks-last``, unmarked and with the
fireworks last (``hb <next seat's cards> <its marks> <my knowledge> <fireworks' heights> ...``).
One torch thread.

    python -m benchmarks.hanabi_imitation                          # 2x64 (the recipe's model), 3,000 steps
    python -m benchmarks.hanabi_imitation --order fireworks-first unmarked --seeds 0 1 2
    python -m benchmarks.hanabi_imitation --steps 12000 --order unmarked fireworks-last
    python -m benchmarks.hanabi_imitation --sizes 2x64 4x64 2x128 --seeds 0 1 2 --steps 6000 --at 1500 3000 4500

Ends with ``ratio: X``: the first run's score beside the bot over the bot's self-play score (not
a speed ratio).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

SIZE = {"players": 2, "colours": 3, "ranks": 4, "hand": 4}


def fireworks_last(state) -> str:
    """The terse view in the game's earlier order: the next seat's cards, then its marks, my
    knowledge, the fireworks' heights (``000``), tokens, deck."""
    from flywheel.games.hanabi import mark

    s, n = state.to_move, state.setup.players
    others = [f"{''.join(state.hands[o]) or '.'} {''.join(map(mark, state.knowledge[o])) or '.'}"
              for o in ((s + i) % n for i in range(1, n))]
    mine = "".join(state.knowledge[s]) or "."
    fw = "".join(map(str, state.fireworks))
    return f"hb {' '.join(others)} {mine} {fw} {state.hints}{state.lives} {len(state.deck)}="


def unmarked(state) -> str:
    """The terse view without the marks of playable cards: a playable card's mark is the one it
    would have were it not playable, and my knowledge is what I was told, ``++`` never."""
    from flywheel.games.hanabi import COLOURS, mark

    s, n = state.to_move, state.setup.players
    need = "".join(f"{c}{h + 1}" for c, h in zip(COLOURS, state.fireworks))
    others = ["".join(card + mark(k) for card, k in zip(state.hands[o], state.knowledge[o])) or "."
              for o in ((s + i) % n for i in range(1, n))]
    mine = "".join(state.knowledge[s]) or "."
    return f"hb {need} {' '.join(others)} {mine} {state.hints}{state.lives} {len(state.deck)}="


def render(state, order: str) -> str:
    """A view as ``order`` writes it: the game's own (fireworks first), or an earlier one."""
    if order == "fireworks-first":
        return state.text()
    return unmarked(state) if order == "unmarked" else fireworks_last(state)


def labelled_views(seed: int, games: int, order: str = "fireworks-first") -> dict[str, str]:
    """View -> the cautious bot's move, from ``games`` games of the recipe's size."""
    from flywheel.games.hanabi import Setup, parse_view
    from flywheel.games.hanabi_policy import cautious_move
    from flywheel.games.hanabi_referee import new_deal, parse_deal

    setup, rng, out = Setup(**SIZE), random.Random(seed), {}
    for g in range(games):
        state = parse_deal(new_deal(setup, rng))
        while not state.over():
            move = cautious_move(parse_view(state.key()))
            out.setdefault(render(state, order), move)
            random_seat = g % 2 == 1 and state.to_move == 1
            state = state.play(rng.choice(state.legal_moves()) if random_seat else move)
    return out


def train_imitator(layers: int, width: int, steps: int, train: dict[str, str], seed: int = 0, device: str = "cpu",
                   after_step=None):
    """A fresh model of that size trained on ``train`` (view -> move) on ``device``; returns (model,
    tokenizer). ``after_step(model, tok, n)`` is called after the n-th step."""
    import torch

    from flywheel.config.world_settings import ModelSpec
    from flywheel.ground.records import Prompt
    from flywheel.worlds.tinymodels import build_model, build_tokenizer, pretrain

    torch.set_num_threads(1)  # the same arithmetic whatever the machine's core count
    tok = build_tokenizer()
    spec = ModelSpec(name="imitator", categories=["hanabi"], steps=steps, n_layer=layers, n_embd=width)
    model = build_model(spec, len(tok), seed).to(device)
    hook = None if after_step is None else (lambda n: after_step(model, tok, n))
    pretrain(model, tok, [Prompt(str(i), v, "hanabi", 0, m) for i, (v, m) in enumerate(train.items())], spec, 64, seed,
             hook)
    return model, tok


def held_out_share(model, tok, test: dict[str, str]) -> float:
    """The share of ``test`` moves the model names exactly (teacher-forced)."""
    import torch

    from flywheel.ground.records import Prompt
    from flywheel.worlds.tinymodels import encode_pool

    right = 0
    with torch.no_grad():
        for prompt, answer in encode_pool(tok, [Prompt(str(i), v, "hanabi", 0, m) for i, (v, m) in enumerate(test.items())]):
            logits = model(input_ids=torch.tensor([prompt + answer], device=model.device)).logits[0]
            right += logits[len(prompt) - 1:len(prompt) + len(answer) - 1].argmax(-1).tolist() == answer
    return right / len(test)


def with_the_bot(model, tok, order: str, deals: int = 40) -> tuple[list[int], list[int]]:
    """Scores of the model beside the bot (each deal twice, the model in seat 0 then 1) and of the
    bot's self-play on the same deals."""
    import torch

    from flywheel.games.hanabi import Setup, parse_move, parse_view
    from flywheel.games.hanabi_policy import cautious_move
    from flywheel.games.hanabi_referee import new_deal, parse_deal

    def model_move(state) -> str:
        ids = tok(render(state, order), add_special_tokens=False).input_ids
        out = model.generate(input_ids=torch.tensor([ids], device=model.device), max_new_tokens=3, do_sample=False)
        move = parse_move(tok.decode(out[0, len(ids):], skip_special_tokens=True))
        return move if move in state.legal_moves() else "d1"

    def play(deal: str, model_seat: int | None) -> int:
        state = parse_deal(deal)
        while not state.over():
            mine = state.to_move == model_seat
            state = state.play(model_move(state) if mine else cautious_move(parse_view(state.key())))
        return state.score

    setup, rng = Setup(**SIZE), random.Random(2)
    pairs, bots = [], []
    with torch.no_grad():
        for _ in range(deals):
            deal = new_deal(setup, rng)
            pairs += [play(deal, 0), play(deal, 1)]
            bots.append(play(deal, None))
    return pairs, bots


def mean_ci(xs: list[int]) -> str:
    return f"{statistics.mean(xs):.2f} +- {1.96 * statistics.stdev(xs) / len(xs) ** 0.5:.2f}"


def reporter(label: str, order: str, test: dict[str, str], at: list[int], steps: int, ratios: list[float]):
    """What a run reports after step n (at ``at`` and at its last step): the held-out share and the
    scores beside the bot; the last step's ratio goes to ``ratios``."""
    t0 = time.perf_counter()

    def report(model, tok, n: int) -> None:
        if n not in at and n != steps:
            return
        share = held_out_share(model, tok, test)
        pairs, bots = with_the_bot(model, tok, order)
        if n == steps:
            ratios.append(statistics.mean(pairs) / statistics.mean(bots))
        print(f"{label}: {n} steps, the bot's move named in {share:.3f} of the held-out views; beside the bot "
              f"{mean_ci(pairs)}, the bot with itself {mean_ci(bots)} ({time.perf_counter() - t0:.0f} s)", flush=True)
    return report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", nargs="+", default=["2x64"], help="model sizes, LAYERSxWIDTH (default 2x64)")
    ap.add_argument("--steps", type=int, default=3000, help="training steps at batch 64 (default 3,000)")
    ap.add_argument("--at", type=int, nargs="*", default=[], help="also report at these steps of the run (its "
                    "learning curve: one run of --steps steps, seen part-way)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0], help="model seeds (initial weights, batches)")
    ap.add_argument("--games", type=int, default=1500, help="games whose views are the train set (default 1,500)")
    ap.add_argument("--order", nargs="+", default=["fireworks-first"],
                    choices=["fireworks-first", "unmarked", "fireworks-last"],
                    help="how the views are written (default: the game's own, fireworks first)")
    ap.add_argument("--device", default="cpu", help="where the model trains and plays (cpu, cuda)")
    args = ap.parse_args()
    ratios = []
    for order in args.order:
        train, test = labelled_views(0, args.games, order), labelled_views(1, 150, order)
        test = {v: m for v, m in test.items() if v not in train}
        print(f"{order}: {len(train)} train views, {len(test)} held-out views")
        for size in args.sizes:
            layers, width = (int(x) for x in size.split("x"))
            for seed in args.seeds:
                report = reporter(f"{order} {size} seed {seed}", order, test, args.at, args.steps, ratios)
                train_imitator(layers, width, args.steps, train, seed, args.device, report)
    print(f"ratio: {ratios[0]:.3f}")


if __name__ == "__main__":
    main()
