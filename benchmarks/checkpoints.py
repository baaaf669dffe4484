"""What training's checkpoints (``train.checkpoint_steps``) cost, and that they change nothing else.

Per seed, the embedded default's student is trained the embedded default's way (``train.*`` as
configured: 1,200 SFT steps) on the task suite's train prompts with their reference answers, once
with checkpoints every ``--every`` steps and once without, in alternating order, in this process
(after one untimed training, the warm-up).
Printed per seed: both wall times, the size of one checkpoint, and whether the two versions have
the same weights and loss (they must: a checkpoint only saves). It ends with ``ratio: X``, the mean
time without checkpoints over the mean time with them (1.0: free; below 1: they cost), with a 95%
CI over seeds of the per-seed ratios.

    python -m benchmarks.checkpoints --seeds 0,1,2 [--every 200] [--set train.steps=600]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from benchmarks.stats import mean_ci, parse_seeds


def sft_rows(cfg):
    """The train split's prompts with their reference answers, as SFT rows."""
    from datasets import Dataset

    from flywheel.worlds.world import world_pools

    train = [p for p in world_pools(cfg.world).train if p.reference is not None]
    return Dataset.from_dict({"prompt": [p.text for p in train], "completion": [p.reference for p in train]})


def same_weights(a: Path, b: Path) -> bool:
    import torch
    from transformers import AutoModelForCausalLM

    x = dict(AutoModelForCausalLM.from_pretrained(a).named_parameters())
    y = dict(AutoModelForCausalLM.from_pretrained(b).named_parameters())
    return x.keys() == y.keys() and all(torch.equal(x[n], y[n]) for n in x)


def trained(base: str, out: Path, data, cfg, seed: int, state: Path) -> tuple[float, float | None, int]:
    """Seconds, loss, and the bytes of the checkpoint left in ``state`` (kept, to be measured)."""
    from flywheel.learning.training import TrainJob, train_version

    t0 = time.perf_counter()
    res = train_version(TrainJob(base, out, cfg.steps, seed, state_dir=state), cfg, data)
    secs = time.perf_counter() - t0
    size = sum(f.stat().st_size for f in state.rglob("*") if f.is_file()) if state.exists() else 0
    return secs, res.loss, size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", nargs="+", default=["0", "1", "2"])
    ap.add_argument("--every", type=int, default=200, help="train.checkpoint_steps of the arm with checkpoints")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args()
    seeds = parse_seeds(args.seeds)

    import datasets
    import transformers

    from flywheel.config.loading import load_config
    from flywheel.worlds.tinymodels import bootstrap

    datasets.disable_progress_bars()
    transformers.utils.logging.disable_progress_bar()
    cfg = load_config(None, args.overrides)
    bootstrap(cfg.world)
    base = str(Path(cfg.world.models_dir) / cfg.targets[0].name)
    data = sft_rows(cfg)
    with_ckpt = cfg.train.model_copy(update={"checkpoint_steps": args.every})
    without = cfg.train.model_copy(update={"checkpoint_steps": 0})
    print(f"{cfg.targets[0].name}: {cfg.train.steps} SFT steps of {cfg.train.batch_size} on {len(data)} rows; "
          f"checkpoints every {args.every} steps against none")
    with tempfile.TemporaryDirectory(prefix="flywheel-ckpt-") as tmp:  # untimed: the first training's warm-up
        trained(base, Path(tmp) / "warm-up", data, without.model_copy(update={"steps": 50}), 0, Path(tmp) / "state")
    ratios, t_with, t_without = [], [], []
    for seed in seeds:
        with tempfile.TemporaryDirectory(prefix="flywheel-ckpt-") as tmp:
            root = Path(tmp)
            order = [("with", with_ckpt), ("without", without)]
            got = {}
            for name, tc in (order if seed % 2 == 0 else order[::-1]):
                got[name] = trained(base, root / name, data, tc, seed, root / f"state-{name}")
            same = same_weights(root / "with", root / "without") and got["with"][1] == got["without"][1]
        (a, _, size), (b, _, _) = got["with"], got["without"]
        ratios.append(b / a)
        t_with.append(a)
        t_without.append(b)
        print(f"seed {seed}: with {a:.1f} s, without {b:.1f} s, one checkpoint {size / 1e6:.2f} MB; "
              f"same weights and loss: {'yes' if same else 'NO'}")
    m, h = mean_ci(ratios)
    print(f"mean with {sum(t_with) / len(t_with):.1f} s, without {sum(t_without) / len(t_without):.1f} s; "
          f"per-seed ratio {m:.3f} +- {h:.3f} (95% CI over {len(seeds)} seeds)")
    print(f"ratio: {sum(t_without) / sum(t_with):.3f}")


if __name__ == "__main__":
    main()
