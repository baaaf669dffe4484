"""How well can a tiny model imitate the cautious Hanabi partner? An upper bound on what the Hanabi
recipe's curation can teach: supervised training on the bot's own moves alone.

Views come from games of the recipe's size (``flows/recipes/hanabi.yaml``: 2 seats, 3 colours,
ranks 1-4, hands of 4): half bot-and-bot, half bot-and-random (the random mover in seat 1, so that
the views cover positions a weaker partner leads to). Each view is labelled with the cautious
bot's move there (``flywheel/games/hanabi_policy.py``). Train views come from ``--games`` deals of
seed 0, held-out views from 150 deals of seed 1 (those also in train left out). Per model size
(``--sizes LAYERSxWIDTH``), the embedded world's character-level GPT is trained on the train views
with its own pre-training loop (AdamW, batch 64, ``--steps``); the figure is the share of held-out
views whose move it names exactly (greedy, token by token). One torch thread.

    python -m benchmarks.hanabi_imitation                          # 2x64 (the recipe's model), 3,000 steps
    python -m benchmarks.hanabi_imitation --sizes 2x64 4x128 --steps 3000

Ends with ``ratio: X``: the first size's held-out share (not a speed ratio: the share of the
bot's moves it reproduces).
"""

from __future__ import annotations

import argparse
import random
import time


def labelled_views(seed: int, games: int) -> dict[str, str]:
    """View -> the cautious bot's move, from ``games`` games of the recipe's size."""
    from flywheel.games.hanabi import Setup, parse_view
    from flywheel.games.hanabi_policy import cautious_move
    from flywheel.games.hanabi_referee import new_deal, parse_deal

    setup, rng, out = Setup(players=2, colours=3, ranks=4, hand=4), random.Random(seed), {}
    for g in range(games):
        state = parse_deal(new_deal(setup, rng))
        while not state.over():
            move = cautious_move(parse_view(state.key()))
            out.setdefault(state.text(), move)
            random_seat = g % 2 == 1 and state.to_move == 1
            state = state.play(rng.choice(state.legal_moves()) if random_seat else move)
    return out


def held_out_share(layers: int, width: int, steps: int, train: dict[str, str], test: dict[str, str]) -> float:
    """Train a fresh model on ``train`` and return the share of ``test`` moves it names exactly."""
    import torch

    from flywheel.ground.config_world import ModelSpec
    from flywheel.ground.records import Prompt
    from flywheel.worlds.tinymodels import build_model, build_tokenizer, encode_pool, pretrain

    torch.set_num_threads(1)  # the same arithmetic whatever the machine's core count
    tok = build_tokenizer()
    spec = ModelSpec(name="imitator", categories=["hanabi"], steps=steps, n_layer=layers, n_embd=width)
    model = build_model(spec, len(tok), 0)
    pretrain(model, tok, [Prompt(str(i), v, "hanabi", 0, m) for i, (v, m) in enumerate(train.items())], spec, 64, 0)
    right = 0
    with torch.no_grad():
        for prompt, answer in encode_pool(tok, [Prompt(str(i), v, "hanabi", 0, m) for i, (v, m) in enumerate(test.items())]):
            logits = model(input_ids=torch.tensor([prompt + answer])).logits[0]
            right += logits[len(prompt) - 1:len(prompt) + len(answer) - 1].argmax(-1).tolist() == answer
    return right / len(test)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", nargs="+", default=["2x64"], help="model sizes, LAYERSxWIDTH (default 2x64)")
    ap.add_argument("--steps", type=int, default=3000, help="training steps at batch 64 (default 3,000)")
    ap.add_argument("--games", type=int, default=1500, help="games whose views are the train set (default 1,500)")
    args = ap.parse_args()
    train, test = labelled_views(0, args.games), labelled_views(1, 150)
    test = {v: m for v, m in test.items() if v not in train}
    print(f"{len(train)} train views, {len(test)} held-out views")
    shares = []
    for size in args.sizes:
        layers, width = (int(x) for x in size.split("x"))
        t0 = time.perf_counter()
        shares.append(held_out_share(layers, width, args.steps, train, test))
        print(f"{size}: {args.steps} steps, the bot's move named in {shares[-1]:.3f} of the held-out views "
              f"({time.perf_counter() - t0:.0f} s)")
    print(f"ratio: {shares[0]:.3f}")


if __name__ == "__main__":
    main()
