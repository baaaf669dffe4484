"""The local paths on a GPU against the CPU, in one run: a model of SmolLM2-135M-Instruct's shape
(its architecture and sizes, random weights: the hub is out of reach, and speed does not depend
on the weights) answers and trains through the flywheel's own code, once per device.

Per device, in a fresh process of its own (``CUDA_VISIBLE_DEVICES=`` hides the GPU for ``cpu``):

- **answer**: ``TransformersPlayer`` (``device: auto``, ``dtype: auto``) answers ``--prompts``
  prompts of the embedded suite in one batch, greedy, ``--new-tokens`` tokens each; after one
  warm-up batch, the median of ``--repeats`` timed batches.
- **sft**, **dpo**: ``train_version`` (``train.precision: auto``) trains the model at batch size
  8, from loading to the saved version, once for each of the two ``--steps`` counts; the time per
  step is the difference of the two times over the difference of the steps (loading, the
  trainer's set-up and saving cancel out), and the fixed cost is what is left.

Each device's line names the precision the code chose (bf16 on a GPU that supports it, fp32 on
the CPU). The last line, ``ratio: X``, is the CPU's SFT time over the GPU's.

    python -m benchmarks.gpu                        # every device this machine has
    python -m benchmarks.gpu --devices cpu --steps 1,2 --prompts 8 --new-tokens 16   # a smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# SmolLM2-135M-Instruct's architecture (its config.json on the hub).
SMOLLM2_SHAPE = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                     num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
                     rms_norm_eps=1e-5, rope_theta=100000.0, tie_word_embeddings=True)


def build(out: Path) -> None:
    """A random model of SmolLM2-135M's shape with the embedded world's tokenizer, saved to ``out``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from flywheel.ground.checkpoints import save_checkpoint
    from flywheel.worlds.tinymodels import build_tokenizer

    torch.manual_seed(0)
    tok = build_tokenizer()
    cfg = LlamaConfig(**SMOLLM2_SHAPE, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id)
    save_checkpoint(LlamaForCausalLM(cfg), tok, out)


def measure(path: Path, args: argparse.Namespace) -> dict:
    """One device's figures (this process's device: cuda when visible, else cpu)."""
    import torch
    from datasets import Dataset

    from flywheel.config.tree import TrainConfig
    from flywheel.learning.training import Hardware, TrainJob, precision, train_version
    from flywheel.players import SamplingParams
    from flywheel.players.hf import TransformersPlayer
    from flywheel.worlds.tasks import build_suite

    train, _ = build_suite(0, 20, 1)
    prompts = train[: args.prompts]
    player = TransformersPlayer("bench", str(path), batch_size=len(prompts))
    params = SamplingParams(max_new_tokens=args.new_tokens)
    player.generate(prompts, params)
    times = []
    for _ in range(args.repeats):
        if player.device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        player.generate(prompts, params)
        times.append(time.perf_counter() - t0)
    player.close()
    rows = train[:64]
    sft = Dataset.from_dict({"prompt": [p.text for p in rows], "completion": [str(p.reference) for p in rows]})
    dpo = Dataset.from_dict({"prompt": [p.text for p in rows], "chosen": [str(p.reference) for p in rows],
                             "rejected": [str(p.reference)[::-1] + "0" for p in rows]})
    cfg = TrainConfig(batch_size=8)
    train_s = {}
    few, many = args.steps
    with tempfile.TemporaryDirectory() as tmp:
        for method in ("sft", "dpo"):
            took = {}
            for steps in (few, many):
                t0 = time.perf_counter()
                res = train_version(TrainJob(str(path), Path(tmp) / f"{method}{steps}", steps=steps, seed=0,
                                             method=method), cfg, sft, dpo)
                took[steps] = time.perf_counter() - t0
                assert res.steps == steps and res.loss is not None, res
            train_s[method] = (took[many] - took[few]) / (many - few)
            train_s[method + "_fixed"] = took[few] - few * train_s[method]
    name = torch.cuda.get_device_name(0) if player.device == "cuda" else f"cpu ({torch.get_num_threads()} threads)"
    return {"device": name, "precision": precision(cfg, Hardware.detect()),
            "answers_per_s": len(prompts) / statistics.median(times), "sft_s_per_step": train_s["sft"],
            "dpo_s_per_step": train_s["dpo"], "sft_fixed_s": train_s["sft_fixed"], "dpo_fixed_s": train_s["dpo_fixed"]}


def run_on(device: str, path: Path, argv: list[str]) -> dict:
    env = dict(os.environ)
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    out = subprocess.run([sys.executable, "-m", "benchmarks.gpu", "--child", str(path), *argv], env=env,
                         capture_output=True, text=True, check=False)
    if out.returncode:
        sys.exit(f"{device}: the measuring process failed\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--devices", default="auto", help="cpu, cuda or both (auto: cuda too where visible)")
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=lambda s: tuple(int(x) for x in s.split(",")), default=(10, 60),
                    help="two step counts, FEW,MANY (default 10,60)")
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    own = [f"--prompts={args.prompts}", f"--new-tokens={args.new_tokens}", f"--repeats={args.repeats}",
           f"--steps={args.steps[0]},{args.steps[1]}"]
    if args.child:
        print(json.dumps(measure(args.child, args)))
        return
    import torch

    devices = args.devices.split(",") if args.devices != "auto" else (
        ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"])
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "smollm2-shaped"
        build(path)
        got = {d: run_on(d, path, own) for d in devices}
    print(f"SmolLM2-135M's shape, random weights; {args.prompts} prompts x {args.new_tokens} new tokens (greedy, "
          f"median of {args.repeats}); training at batch 8, s/step from {args.steps[0]} and {args.steps[1]} steps, "
          f"fixed: loading, set-up and saving")
    print(f"{'device':34} {'precision':>9} {'answers/s':>10} {'sft s/step':>11} {'dpo s/step':>11} "
          f"{'sft fixed s':>12} {'dpo fixed s':>12}")
    for g in got.values():
        print(f"{g['device']:34} {g['precision']:>9} {g['answers_per_s']:10.1f} {g['sft_s_per_step']:11.3f} "
              f"{g['dpo_s_per_step']:11.3f} {g['sft_fixed_s']:12.2f} {g['dpo_fixed_s']:12.2f}")
    if "cpu" in got and "cuda" in got:
        print(f"answers: cuda {got['cuda']['answers_per_s'] / got['cpu']['answers_per_s']:.1f}x the cpu; "
              f"dpo: {got['cpu']['dpo_s_per_step'] / got['cuda']['dpo_s_per_step']:.1f}x")
        print(f"ratio: {got['cpu']['sft_s_per_step'] / got['cuda']['sft_s_per_step']:.1f}")


if __name__ == "__main__":
    main()
