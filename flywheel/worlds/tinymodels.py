"""Tiny character-level GPT models that the project builds and pre-trains itself.

The tokenizer is made locally with ``tokenizers`` (one token per character, plus ``<pad>``,
``<eos>`` and ``<unk>``), wrapped as a ``PreTrainedTokenizerFast``; the model is a transformers
``GPT2LMHeadModel``. Both are written with ``save_pretrained`` and load back with the Auto
classes, exactly like a hub checkpoint would.
"""

from __future__ import annotations

import json
import logging
import random
import string
import time
from collections.abc import Callable
from pathlib import Path

import torch

from flywheel.config.tree import ModelSpec, WorldConfig
from flywheel.ground.checkpoints import save_checkpoint
from flywheel.ground.records import Prompt, stable_id
from flywheel.worlds.followups import two_turn_examples
from flywheel.worlds.game_pools import game_splits
from flywheel.worlds.game_pools import pretraining_pool as game_pool
from flywheel.worlds.tasks import SUITE_VERSION, build_suite, take_validation

log = logging.getLogger("flywheel")

SPECIALS = ["<pad>", "<eos>", "<unk>"]
CHARS = string.digits + string.ascii_lowercase + " +-*="
PAD_ID, EOS_ID = 0, 1


def build_tokenizer():  # -> PreTrainedTokenizerFast
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(SPECIALS + list(CHARS))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens(SPECIALS)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        eos_token="<eos>",
        unk_token="<unk>",
        padding_side="left",
    )


def build_model(spec: ModelSpec, vocab_size: int, seed: int):  # -> GPT2LMHeadModel
    from transformers import GPT2Config, GPT2LMHeadModel

    if spec.n_embd % spec.n_head:
        raise ValueError(f"model {spec.name}: n_embd {spec.n_embd} is not a multiple of n_head")
    cfg = GPT2Config(
        vocab_size=vocab_size,
        n_positions=ModelSpec.positions,
        n_embd=spec.n_embd,
        n_layer=spec.n_layer,
        n_head=spec.n_head,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=EOS_ID,
        eos_token_id=EOS_ID,
        pad_token_id=PAD_ID,
    )
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(cfg)
    model.generation_config.pad_token_id = PAD_ID
    model.generation_config.eos_token_id = EOS_ID
    return model


def encode_pool(tokenizer, prompts: list[Prompt]) -> list[tuple[list[int], list[int]]]:
    """Token ids of every (prompt, answer + ``<eos>``), tokenized once up front."""
    pi = tokenizer([p.text for p in prompts], add_special_tokens=False).input_ids
    ai = tokenizer([str(p.reference) for p in prompts], add_special_tokens=False).input_ids
    return [(x, y + [EOS_ID]) for x, y in zip(pi, ai)]


def collate(pairs: list[tuple[list[int], list[int]]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded (input_ids, attention_mask, labels); loss only on the answer and ``<eos>``."""
    seqs = [p + a for p, a in pairs]
    labels = [[-100] * len(p) + a for p, a in pairs]
    width = max(map(len, seqs))
    ids = torch.tensor([s + [PAD_ID] * (width - len(s)) for s in seqs])
    lab = torch.tensor([x + [-100] * (width - len(x)) for x in labels])
    mask = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in seqs])
    return ids, mask, lab


def pretrain(model, tokenizer, pool: list[Prompt], spec: ModelSpec, batch_size: int, seed: int,
             after_step: Callable[[int], None] | None = None) -> float:
    """AdamW with warm-up and linear decay on answer tokens, on the model's device; returns the
    last loss. ``after_step(n)`` is called after the n-th step (a benchmark's learning curve)."""
    rng = random.Random(seed)
    torch.manual_seed(seed)
    encoded = encode_pool(tokenizer, pool)
    opt = torch.optim.AdamW(model.parameters(), lr=spec.learning_rate, weight_decay=0.0)
    model.train()
    loss_value = float("nan")
    for step in range(spec.steps):
        lr = spec.learning_rate * min(1.0, (step + 1) / 50) * (1 - step / spec.steps)
        for group in opt.param_groups:
            group["lr"] = lr
        ids, mask, lab = (t.to(model.device) for t in collate(rng.sample(encoded, min(batch_size, len(encoded)))))
        loss = model(input_ids=ids, attention_mask=mask, labels=lab).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss_value = float(loss.detach())
        if after_step is not None:
            after_step(step + 1)
            model.train()
    model.eval()
    return loss_value


MADE_WITH = "flywheel-model.json"


NOT_PRETRAINING = {"max_illegal", "symmetries", "missed_moves", "tactics"}  # games settings that pre-training does not read


def fingerprint(world: WorldConfig, spec: ModelSpec, seed: int) -> dict:
    """What a pre-trained model depends on: the task suite (its splits), the model's spec, the
    batch size and the seed. Stored with the model as ``flywheel-model.json``."""
    made = {"tasks": world.tasks.model_dump(mode="json"), "suite": SUITE_VERSION,
            "model": spec.model_dump(mode="json"), "batch_size": world.batch_size, "seed": seed}
    if world.conversation.turns > 1:  # (kept out otherwise, likewise) second turns in the pool
        made["turns"] = 2
    if world.kind == "games":  # (kept out otherwise: task models keep their fingerprints)
        skip: dict = dict.fromkeys(NOT_PRETRAINING, True)
        skip["hanabi"] = {"teams": True} if "hanabi" in world.games.games else True  # other games' models keep theirs
        made = {"games": world.games.model_dump(mode="json", exclude=skip), "model": spec.model_dump(mode="json"),
                "batch_size": world.batch_size, "seed": seed}
    return {"kind": "tiny", "fingerprint": stable_id(json.dumps(made, sort_keys=True)), "made_with": made}


def _stale(out: Path, want: dict) -> str | None:
    """Why the model at ``out`` must be rebuilt (None: it is current)."""
    path = out / MADE_WITH
    if not path.is_file():
        return "it records no fingerprint (built by an older version)"
    have = json.loads(path.read_text(encoding="utf-8"))
    if have.get("fingerprint") != want["fingerprint"]:
        return f"it was pre-trained on another suite or settings (fingerprint {have.get('fingerprint')} != {want['fingerprint']})"
    return None


def pretraining_pool(world: WorldConfig, spec: ModelSpec, seed: int) -> list[Prompt]:
    """What a model pre-trains on: the task suite's train pool in its categories (never the
    validation or eval split), in a multi-turn world (``world.conversation.turns`` > 1) with each
    prompt's second turn too (``flywheel.worlds.followups``); in a games world, random legal moves in random play-outs of its
    games (never in an eval or validation start position)."""
    if world.kind == "games":
        _, evals, validation = game_splits(world.games)
        return game_pool(world.games, spec.categories, world.games.pretrain_examples, seed,
                         {p.text for p in evals + validation})
    train, _ = build_suite(world.tasks.seed, world.tasks.train_per_cell, world.tasks.eval_per_cell,
                           world.tasks.categories, world.tasks.levels)
    pool = [p for p in take_validation(train, world.tasks.val_per_cell)[0] if p.category in spec.categories]
    return pool + two_turn_examples(pool) if world.conversation.turns > 1 else pool


def bootstrap(world: WorldConfig, force: bool = False, only: list[str] | None = None) -> list[Path]:
    """Build and pre-train every model of ``world`` that is missing or stale; returns their directories.

    A task model is pre-trained on the train pool only (never the validation or eval split); a
    games model on random legal moves in random play-outs (never from an eval or validation
    start position), so it knows the format and not the game. Pre-training is deterministic
    under ``world.seed``, and each model is written atomically (tmp dir, then rename) with its
    fingerprint (``flywheel-model.json``). A model whose fingerprint does not match the suite and
    settings it would be built with now is rebuilt, and the log says why.
    """
    world.models_dir.mkdir(parents=True, exist_ok=True)
    made = []
    for i, spec in enumerate(world.models):
        if only and spec.name not in only:
            continue
        out = world.models_dir / spec.name
        stamp = fingerprint(world, spec, world.seed + i)
        if out.exists() and not force:
            why = _stale(out, stamp)
            if why is None:
                continue
            log.info("rebuilding %s: %s", out, why)
        pool = pretraining_pool(world, spec, world.seed + i)
        if not pool:
            raise ValueError(f"model {spec.name}: no train prompts in categories {spec.categories}")
        t0 = time.perf_counter()
        tokenizer = build_tokenizer()
        model = build_model(spec, len(tokenizer), seed=world.seed + i)
        loss = pretrain(model, tokenizer, pool, spec, world.batch_size, seed=world.seed + i)
        save_checkpoint(model, tokenizer, out, extra={MADE_WITH: json.dumps(stamp, indent=2) + "\n"})
        log.info("bootstrapped %s: %d steps, loss %.3f, %.1fs", spec.name, spec.steps, loss, time.perf_counter() - t0)
        made.append(out)
    return made
