"""What an RL phase has to work with, and what it does to the target, measured on the validation
split (never the eval split).

Before the phase, per category and level: the greedy answer's pass rate (pass@1, what eval
reports), one sampled answer's pass rate, pass@g (g = ``train.rl.generations``, what one group of a
phase can find; estimated from the k) and pass@k (k answers sampled at ``train.rl.temperature``):
the headroom RL can use, and the share of flat groups (all k right, or all wrong). Then a real
phase (``train.method``: grpo, rloo) from the same checkpoint on train-split prompts with the
verifier's reward, and every ``--every`` steps: greedy and sampled validation accuracy, the answers'
mean length in tokens and the share that end (the end-of-text token before the length limit), the
KL to the starting checkpoint (the mean over sampled answers of log p_now - log p_start, summed over
each answer's tokens), and the trainer's flat groups since the last row.

    python -m benchmarks.rl_diagnose --model RUN/models/student@3 --steps 300 --every 50
    python -m benchmarks.rl_diagnose --model RUN/models/student@3 --set train.rl.args='{loss_type: dr_grpo}'
    python -m benchmarks.rl_diagnose --model RUN/models/smollm2@1 --recipe flows/recipes/smollm2_rl.yaml --steps 0

``--recipe`` reads the run's recipe (its target's system prompt, sampling temperature and verifier), and
``--steps 0`` stops after the headroom. ``--set`` takes any config override
(``train.rl.learning_rate=1e-4``); ``--dynamic-sampling`` first
samples k answers to each train prompt and keeps the prompts whose answers differ, as the train
stage does (``train.rl.dynamic_sampling``)."""

from __future__ import annotations

import argparse
import json
import random
import tempfile
from collections import defaultdict
from math import comb
from pathlib import Path

from benchmarks.worlds import add_world_args, worlds_of


def generate(model, tok, texts: list[str], max_new: int, temperature: float | None, seed: int, batch: int = 256):
    """(answer text, tokens generated, ended with the end-of-text token) for each prompt text."""
    import torch

    out = []
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for i in range(0, len(texts), batch):
            enc = tok(texts[i:i + batch], return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
            if temperature:
                torch.manual_seed(seed + i)
            ids = model.generate(**enc, max_new_tokens=max_new, do_sample=bool(temperature), temperature=temperature,
                                 top_k=None, top_p=None, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
            for row in ids[:, enc.input_ids.shape[1]:].tolist():
                ended = tok.eos_token_id in row
                n = row.index(tok.eos_token_id) if ended else len(row)
                out.append((tok.decode(row[:n], skip_special_tokens=True).strip(), n, ended))
    model.train(was_training)
    return out


def pass_at(n: int, c: int, k: int) -> float:
    """The unbiased pass@k of a prompt with c right answers of n sampled: the chance that k of them,
    drawn without replacement, hold at least one right."""
    return 1.0 - comb(n - c, k) / comb(n, k)


def sequence_logprobs(model, tok, texts: list[str], answers: list[str]):
    """log p(answer + end of text | prompt) under ``model``, summed over the answer's tokens, with
    position ids counted from the attention mask (left padding, as ``generate`` sampled)."""
    import torch

    rows = [(tok(t, add_special_tokens=False).input_ids, tok(a, add_special_tokens=False).input_ids + [tok.eos_token_id])
            for t, a in zip(texts, answers)]
    width = max(len(p) + len(a) for p, a in rows)
    ids = torch.full((len(rows), width), tok.pad_token_id)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    answer = torch.zeros((len(rows), width), dtype=torch.bool)
    for i, (p, a) in enumerate(rows):
        ids[i, width - len(p) - len(a):] = torch.tensor(p + a)
        mask[i, width - len(p) - len(a):] = 1
        answer[i, width - len(a):] = True
    was_training = model.training
    model.eval()
    with torch.no_grad():
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        logits = model(input_ids=ids.to(model.device), attention_mask=mask.to(model.device),
                       position_ids=pos.to(model.device)).logits[:, :-1].float()
        lp = torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None].to(model.device))[..., 0]
        out = (lp * answer[:, 1:].to(model.device)).sum(-1)
    model.train(was_training)
    return out.cpu()


class Probe:
    """Validation measurements of a model: greedy and sampled pass rates, length, ends, KL."""

    def __init__(self, cfg, start_path: str, prompts, k: int, seed: int) -> None:
        from flywheel.players.hf import TransformersPlayer
        from judges.build import build_verifier

        pc = cfg.targets[0]
        self.start = TransformersPlayer("start", start_path, system_prompt=pc.system_prompt, device="cpu",
                                        dtype="float32")
        self.tok, self.prompts, self.k, self.seed = self.start.tokenizer, prompts, k, seed
        self.texts = [self.start.render(p) for p in prompts]
        self.verifier = build_verifier(cfg.judge.verifier)
        self.max_new, self.temperature = pc.max_new_tokens, cfg.train.rl.temperature
        self.g = min(cfg.train.rl.generations, k)  # a phase's group size: pass@g is what it can find

    def right(self, answer: str, i: int) -> bool:
        return self.verifier.score(answer, self.prompts[i].reference) >= 1.0

    def cells(self, model) -> dict:
        """Per (category, level) and overall: greedy pass@1, sampled pass rate, pass@k, flat groups."""
        greedy = generate(model, self.tok, self.texts, self.max_new, None, self.seed)
        many = generate(model, self.tok, [t for t in self.texts for _ in range(self.k)], self.max_new,
                        self.temperature, self.seed)
        by: dict[str, list] = defaultdict(list)
        for i, p in enumerate(self.prompts):
            got = [self.right(a, i) for a, _, _ in many[i * self.k:(i + 1) * self.k]]
            row = (self.right(greedy[i][0], i), sum(got) / self.k, any(got), len(set(got)) == 1,
                   pass_at(self.k, sum(got), self.g))
            by[f"{p.category}/{p.level}"].append(row)
            by["all"].append(row)
        return {c: {"prompts": len(v), "greedy": round(sum(r[0] for r in v) / len(v), 3),
                    "sampled": round(sum(r[1] for r in v) / len(v), 3), "pass_at_k": round(sum(r[2] for r in v) / len(v), 3),
                    "flat": round(sum(r[3] for r in v) / len(v), 3),
                    "pass_at_g": round(sum(r[4] for r in v) / len(v), 3)} for c, v in sorted(by.items())}

    def point(self, model) -> dict:
        greedy = generate(model, self.tok, self.texts, self.max_new, None, self.seed)
        sampled = generate(model, self.tok, self.texts, self.max_new, self.temperature, self.seed)
        free = generate(model, self.tok, self.texts, self.max_new, 1.0, self.seed + 1)  # for the KL: model's own samples
        now = sequence_logprobs(model, self.tok, self.texts, [a for a, _, _ in free])
        then = sequence_logprobs(self.start.model, self.tok, self.texts, [a for a, _, _ in free])
        n = len(self.prompts)
        return {"greedy": round(sum(self.right(a, i) for i, (a, _, _) in enumerate(greedy)) / n, 3),
                "sampled": round(sum(self.right(a, i) for i, (a, _, _) in enumerate(sampled)) / n, 3),
                "greedy_tokens": round(sum(t for _, t, _ in greedy) / n, 2),
                "sampled_tokens": round(sum(t for _, t, _ in sampled) / n, 2),
                "greedy_ended": round(sum(e for _, _, e in greedy) / n, 3),
                "sampled_ended": round(sum(e for _, _, e in sampled) / n, 3),
                "kl": round(float((now - then).mean()), 4)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="the checkpoint the phase starts from (e.g. RUN/models/student@3)")
    add_world_args(ap)
    ap.add_argument("--steps", type=int, default=300,
                    help="optimizer steps of the phase (default 300; 0: the headroom at the start only)")
    ap.add_argument("--every", type=int, default=50, help="measure every this many steps (default 50)")
    ap.add_argument("--k", type=int, default=8, help="answers sampled per validation prompt for pass@k (default 8)")
    ap.add_argument("--prompts", type=int, default=3000, help="train prompts the phase may learn on (default 3000)")
    ap.add_argument("--method", default="grpo", choices=["grpo", "rloo"])
    ap.add_argument("--dynamic-sampling", action="store_true", help="train only on prompts whose k answers differ")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="a config override")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--recipe", type=Path, default=None,
                    help="the recipe the checkpoint's run used (its target's system prompt, sampling and verifier), "
                         "e.g. flows/recipes/smollm2_rl.yaml; default: the embedded world")
    args = ap.parse_args()

    from datasets import Dataset
    from transformers import TrainerCallback

    from flywheel.config.loading import load_config
    from flywheel.ground.checkpoints import load_checkpoint
    from flywheel.learning.judge_rewards import verifier_reward
    from flywheel.learning.rl import RewardSummary, RLPhase, RolloutLog
    from flywheel.learning.training import TrainJob, train_version
    from flywheel.worlds.world import world_pools
    from judges.build import build_verifier

    world = worlds_of(args)[0]
    cfg = load_config(args.recipe, [*world.overrides(), *args.overrides])
    splits = world_pools(cfg.world)
    probe = Probe(cfg, args.model, [p for p in splits.validation if p.reference is not None], args.k, args.seed)
    print(f"model {args.model}; {world.label}; {len(probe.prompts)} validation prompts; k={args.k} at temperature "
          f"{probe.temperature}; overrides {args.overrides or 'none'}", flush=True)
    headroom = probe.cells(probe.start.model)
    print(f"\nheadroom at the start (validation): cell, prompts, greedy pass@1, sampled pass rate, pass@{probe.g} "
          f"(train.rl.generations), pass@{args.k}, flat groups of {args.k}")
    for c, v in headroom.items():
        print(f"  {c:<8} {v['prompts']:>4}  {v['greedy']:.3f}  {v['sampled']:.3f}  {v['pass_at_g']:.3f}  "
              f"{v['pass_at_k']:.3f}  {v['flat']:.3f}")
    if args.steps == 0:
        return

    train = [p for p in splits.train if p.reference is not None]
    random.Random(args.seed).shuffle(train)
    train = train[:args.prompts]
    rows = [{"prompt": probe.start.render(p), "prompt_text": p.text, "reference": p.reference, "prompt_id": p.id,
             "category": p.category, "level": p.level} for p in train]
    scorer = verifier_reward(build_verifier(cfg.judge.verifier))
    if args.dynamic_sampling:
        from flywheel.arena.own_answers import sample_groups
        from flywheel.players.player import SamplingParams

        groups = sample_groups(probe.start, SamplingParams(probe.max_new, probe.temperature, args.seed), rows, scorer,
                               k=cfg.train.rl.generations, budget=10 ** 9, at=cfg.train.rl.pass_reward, seed=args.seed)
        keep = {g.row["prompt_id"] for g in groups if not g.flat}
        print(f"\ndynamic sampling: {len(keep)} of {len(rows)} train prompts have answers that differ")
        rows = [r for r in rows if r["prompt_id"] in keep]

    with tempfile.TemporaryDirectory(prefix="rl-diagnose-") as tmp:
        log = Path(tmp) / "rollouts.jsonl"
        curve: list[dict] = []

        class Curve(TrainerCallback):
            def on_step_end(self, a, state, control, model=None, **kw):
                if state.global_step % args.every == 0:
                    got = [r for r in RolloutLog(log).read() if r["step"] > (curve[-1]["step"] if curve else 0)]
                    s = RewardSummary.of(got)
                    curve.append({"step": state.global_step, **probe.point(model), "reward": s.mean,
                                  "flat_groups": s.flat_groups})
                    print(json.dumps(curve[-1]), flush=True)

        curve.append({"step": 0, **probe.point(probe.start.model)})
        print("\nlearning curve (validation):\n" + json.dumps(curve[-1]), flush=True)
        phase = RLPhase(Dataset.from_list(rows), scorer, log, probe.max_new)
        train_version(TrainJob(args.model, Path(tmp) / "out", args.steps, args.seed, method=args.method),
                      cfg.train.model_copy(update={"checkpoint_steps": 0}), rl=phase, callbacks=(Curve(),))
        end = probe.cells(load_checkpoint(str(Path(tmp) / "out")))
    print("\nat the end (validation): cell, greedy pass@1, sampled pass rate, pass@k, flat groups")
    for c, v in end.items():
        h = headroom[c]
        print(f"  {c:<8} {v['greedy']:.3f} ({v['greedy'] - h['greedy']:+.3f})  {v['sampled']:.3f} "
              f"({v['sampled'] - h['sampled']:+.3f})  {v['pass_at_k']:.3f}  {v['flat']:.3f}")


if __name__ == "__main__":
    main()
