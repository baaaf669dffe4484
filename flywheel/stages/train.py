"""train: TRL fine-tunes each target's current version into the next one, by the iteration's
method (``train.method`` / ``train.schedule``): on the curated data (SFT, DPO), on rewards for the
prompts the select stage chose (GRPO), or into a reward model; in this process, or through
``accelerate launch`` (``train.launcher``)."""

from __future__ import annotations

import contextlib
import json
import logging
import random
import shutil
from dataclasses import replace

from flywheel.config.tree import ONLINE_METHODS, RL_METHODS, picks_online, samples_first
from flywheel.ground.atomic import atomic_write_text
from flywheel.ground.cards import hub_card
from flywheel.ground.records import Battle, PlayerVersion, stable_id, versioned
from flywheel.learning.curation import load_dataset_dir
from flywheel.learning.judge_rewards import build_reward
from flywheel.learning.mix import combine
from flywheel.learning.onpolicy import Group, SamplingSummary, expert_rows, keep_chances, preference_rows
from flywheel.learning.reward_training import pair_accuracy, train_reward_model
from flywheel.learning.rl import (
    RewardsFailed,
    RewardSummary,
    RLPhase,
    RolloutLog,
    check_rewards,
    save_rollouts,
    with_advantages,
)
from flywheel.learning.training import Hardware, TrainJob, is_main_process, precision, train_version
from flywheel.players.player import ServesAdapters
from flywheel.run.context import Context, stage
from flywheel.run.results import TargetTraining, TrainResult
from flywheel.stages.rl_prompts import rl_prompts
from flywheel.stages.train_data import pools_traces, shape_for, training_data, weighted
from flywheel.stages.train_weights import mix_weights, pick_weights
from judges.reward_scorer import RewardScorer

log = logging.getLogger("flywheel")


@stage("train", TrainResult, publishes="checkpoints")
def train_targets(ctx: Context, k: int, steps: dict[str, int]) -> TrainResult:
    """Every target's version ``k`` (``steps``: training steps per target), one at a time."""
    one = launch_training if ctx.cfg.train.launcher == "accelerate" else train_target
    done = TrainResult({t: one(ctx, k, t, steps[t]) for t in ctx.roster.targets})
    if ctx.cfg.train.method_of(k) in RL_METHODS and is_main_process():
        publish_rollouts(ctx, k)
    return done


def train_target(ctx: Context, k: int, t: str, steps: int) -> TargetTraining:
    """Train target ``t``'s version k from version k-1 on iteration k's curated data."""
    new = versioned(t, k)
    target_dir = ctx.store.model_dir(new)
    mix = mix_weights(ctx, k, t)
    sft = training_data(ctx, k, "sft", t, weight=mix)
    dpo = training_data(ctx, k, "dpo", t)
    pc = ctx.roster.config(t)
    tc = ctx.cfg.train if pc.learning_rate is None else ctx.cfg.train.model_copy(update={"learning_rate": pc.learning_rate})
    state = ctx.store.train_state_dir(k, t)
    method = tc.method_of(k)
    rl = rl_phase(ctx, k, t) if method in RL_METHODS else None
    picks = dict(rl.weights) if rl is not None and rl.weights is not None else None  # train.rl.gap_pick's
    made = train_reward(ctx, k, t, steps, tc) if method == "reward" else None
    sampled = None
    if rl is not None and samples_first(tc, method):
        groups = own_groups(ctx, k, t, rl, answer_steps(method, steps), tc)
        sampled = SamplingSummary.of(groups, tc.rl.pass_reward).to_json()
        log.info("own answers of %s: %s", t, {x: v for x, v in sampled.items() if x != "by_category"})
        if method == "sft+expert" and tc.rl.thin_known and sft is not None:
            sft, sampled["curated_kept"] = thin_known(ctx, k, t, groups, sft, mix)
        rl, sft, dpo, method = from_own_answers(ctx, k, t, groups=groups, rl=rl, sft=sft, method=method, mix=mix)
    if pc.serve_lora:  # the version is an adapter on the base weights, served by vLLM
        current = ctx.current_version(t, k)
        previous = ctx.store.model_dir(current) if PlayerVersion.parse(current).k else None
        job = TrainJob(ctx.roster.path(versioned(t, 0)), target_dir, steps, ctx.cfg.run.seed + k, method=method,
                       adapter=str(previous) if previous else None, keep_adapter=True, state_dir=state)
        res = train_version(job, tc, sft, dpo, rl=rl)
        if ctx.cfg.allocate.sharing != "federated":  # federated: served once merged
            serve_adapter(ctx, t, k)
    else:
        job = TrainJob(ctx.roster.path(ctx.current_version(t, k)), target_dir, steps, ctx.cfg.run.seed + k,
                       method=method, state_dir=state)
        res = train_version(job, tc, sft, dpo, rl=rl)
    if is_main_process():
        base = versioned(t, 0) if pc.serve_lora else ctx.current_version(t, k)
        atomic_write_text(target_dir / "README.md", model_card(ctx, k, t, base=base, res=res, tc=tc,
                                                               adapter=pc.serve_lora))
        shutil.rmtree(state, ignore_errors=True)  # the version is saved: its checkpoints are no longer needed
        with contextlib.suppress(OSError):  # and the folder of them, once no target's are left
            state.parent.rmdir()
    rewards = RewardSummary.of(res.rollouts).to_json() if res.rollouts is not None else None
    return TargetTraining(version=new, steps=res.steps, loss=res.loss, examples=res.examples,
                          served_as=new if pc.serve_lora else None, rewards=rewards, reward_model=made,
                          sampling=sampled, log=list(res.history) or None, mix=mix,
                          picks=picks)


def thin_known(ctx: Context, k: int, t: str, groups: list[Group], sft, mix: dict[str, float] | None):
    """``train.rl.thin_known``: target ``t``'s curated rows, each kept with the chance its
    category's own pass rate gives it (``keep_chances``; times ``mix``, ``train.gap_mix``'s
    weights), and a record of what was kept. Where none would be left, every row stays (as ``mix``
    weighs them): the phase would have nothing else of the imitation's."""
    keep = keep_chances(groups, ctx.cfg.train.rl.pass_reward)
    thinned = training_data(ctx, k, "sft", t, weight=combine(keep, mix))
    rows = len(thinned) if thinned is not None else 0
    log.info("curated rows of %s, kept by the chance its own pass rates give each category: %d of %d%s", t, rows,
             len(sft), "" if rows else " (none left: every row stays)")
    record = {"rows": rows or len(sft), "of": len(sft), "chance": {c: round(x, 4) for c, x in keep.items()}}
    return (thinned if rows else sft), record


def answer_steps(method: str, steps: int) -> int:
    """The optimizer steps whose answers the sampling budget matches by default: the iteration's,
    half of them after ``sft+`` (the phase's share; ``sft+expert`` too, one phase though it is)."""
    return steps // (2 if method.startswith("sft+") else 1)


def own_groups(ctx: Context, k: int, t: str, rl: RLPhase, steps: int, tc) -> list[Group]:
    """Target ``t``'s own answers to its RL prompts, ``train.rl.generations`` a prompt, sampled in
    rounds that pick the prompts of highest learnability (``flywheel.arena.own_answers``), up to
    ``train.rl.answers`` (default ``steps`` x ``train.batch_size``). Kept in the train state, so
    that a killed phase resumes with the same groups; stops the run where most rewards failed."""
    from flywheel.arena.own_answers import sample_groups

    version = ctx.current_version(t, k)
    params = replace(ctx.roster.params(version), temperature=tc.rl.temperature, max_new_tokens=rl.max_completion_length)
    state = ctx.store.train_state_dir(k, t)
    state.mkdir(parents=True, exist_ok=True)
    saved = state / "own-answers.jsonl"
    groups = sample_groups(ctx.roster.player(version), params, list(rl.prompts), rl.scorer, k=tc.rl.generations,
                           budget=tc.rl.answers or max(steps, 1) * tc.batch_size, at=tc.rl.pass_reward,
                           seed=ctx.cfg.run.seed + 7919 * k, strength=tc.rl.prior_strength,
                           weights=rl.weights, saved=saved)
    try:
        check_rewards(tc.rl, t, [r for g in groups for r in g.rewards], [e for g in groups for e in g.errors])
    except RewardsFailed:
        saved.unlink(missing_ok=True)  # a run resumed once the reward is fixed samples and scores them again
        raise
    if not is_main_process():  # under accelerate every rank reads the same groups; one publishes them
        return groups
    # Published with the rollouts as step 0; a trainer's steps (GRPO, RLOO) follow, and those a
    # resumed phase kept from before its kill stay.
    log_ = RolloutLog(ctx.store.rollout_log(k, t))
    log_.rewrite([{"prompt": g.row["prompt_text"], "completion": a, "reward": r, "error": e, "step": 0,
                   "group": f"0-{g.round}-{g.row['prompt_id']}", "prompt_id": g.row["prompt_id"],
                   "category": g.row.get("category"), "turn": g.row.get("turn") or 1,
                   "history": g.row.get("history") or ""}
                  for g in groups for a, r, e in zip(g.answers, g.rewards, g.errors)]
                 + [r for r in log_.read() if r["step"] > 0])
    return groups


def from_own_answers(ctx: Context, k: int, t: str, *, groups: list[Group], rl: RLPhase, sft, method: str,
                     mix: dict[str, float] | None = None):
    """What the method trains on, from the groups: GRPO and RLOO every prompt where their trainer
    picks online (one process), else the prompts whose groups taught (dynamic sampling); expert iteration the passed answers as SFT rows (after the curated rows
    with ``sft+expert``; each as often as ``mix`` weighs its category, ``train.gap_mix``); on-policy
    DPO (passed, failed) pairs. Returns (rl, sft, dpo, the trainer's method)."""
    from datasets import Dataset, concatenate_datasets

    tc = ctx.cfg.train
    at = tc.rl.pass_reward
    chat, system = ctx.roster.is_chat(t), ctx.roster.config(t).system_prompt
    if not any(not g.flat for g in groups):
        log.warning("%s: none of its %d sampled groups teaches (every answer of each got one reward): its %s phase "
                    "has nothing of its own answers to learn from", t, len(groups), method)
    if picks_online(tc, method):
        return rl, sft, None, method  # the trainer picks by the groups' outcomes (one process only)
    if method in ONLINE_METHODS:
        teach = {g.row["prompt_id"] for g in groups if not g.flat}
        batch = tc.batch_size // tc.rl.generations
        if len(teach) < batch:  # the trainer would drop a batch short of whole groups and take no step
            log.warning("%s: dynamic sampling left %d prompts whose answers differ, fewer than one batch's %d: "
                        "its %s phase learns on every prompt", t, len(teach), batch, method)
            return rl, sft, None, method
        return replace(rl, prompts=rl.prompts.filter(lambda r: r["prompt_id"] in teach, keep_in_memory=True)), sft, \
            None, method
    if method in ("expert", "sft+expert"):
        rows = expert_rows(groups, at)
        own = Dataset.from_list(rows) if rows else None
        if own is not None and mix is not None:
            own = weighted(own, mix, random.Random(ctx.cfg.run.seed + 7919 * k + 1))
        own = shape_for(own, chat, system) if own is not None and len(own) else None
        parts = [p for p in ([sft] if method == "sft+expert" else []) + [own] if p is not None and len(p)]
        mixed = concatenate_datasets(parts).shuffle(seed=ctx.cfg.run.seed + k) if parts else None
        return None, mixed, None, "sft"
    rows = preference_rows(groups, at)
    pairs = shape_for(Dataset.from_list(rows), chat, system) if rows else None
    return None, sft, pairs, "sft+dpo" if method == "sft+onpolicy_dpo" else "dpo"


def train_reward(ctx: Context, k: int, t: str, steps: int, tc) -> dict:
    """``train.method: reward``: a reward model of target ``t`` (a scalar head on its current
    version) trained on the decisive judged pairs of iterations 1..k, saved as
    ``reward-models/<t>@<k>``; its pair accuracy is measured on validation pairs only. The target's
    own version is carried forward unchanged."""
    out = ctx.store.reward_model_dir(t, k)
    pairs = reward_pairs(ctx, k, t)
    res = train_reward_model(ctx.roster.path(ctx.current_version(t, k)), out, pairs, tc, steps, ctx.cfg.run.seed + k,
                             state_dir=ctx.store.train_state_dir(k, t))
    held = validation_pairs(ctx, k, t)
    res = replace(res, accuracy=pair_accuracy(RewardScorer(out), held) if len(held) else None)
    log.info("reward model %s: %d steps on %d pairs, pair accuracy %s on %d validation pairs", out.name, res.steps,
             res.pairs, "n/a" if res.accuracy is None else f"{res.accuracy:.3f}", len(held))
    return {"path": str(out), "steps": res.steps, "loss": res.loss, "pairs": res.pairs,
            "train_accuracy": res.train_accuracy, "accuracy": res.accuracy, "validation_pairs": len(held)}


def reward_pairs(ctx: Context, k: int, t: str):
    """The DPO pairs of iterations 1..``k`` with target ``t`` in them, as the target reads them."""
    from datasets import concatenate_datasets

    parts = [load_dataset_dir(ctx.store.dataset_dir(i, "dpo")) for i in range(1, k + 1)
             if ctx.store.dataset_dir(i, "dpo").exists()]
    parts = [p.select([i for i, x in enumerate(p["target"]) if x == t]) for p in parts]
    parts = [shape_for(p, ctx.roster.is_chat(t), ctx.roster.config(t).system_prompt) for p in parts if len(p)]
    if not parts:
        raise ValueError(f"train.method reward: no decisive judged pairs of target {t} in iterations 1-{k}")
    return concatenate_datasets(parts)


def validation_pairs(ctx: Context, k: int, t: str):
    """Pairs from validation-split battles, never trained on: target ``t``'s current version and
    each opponent answer every validation prompt, the run's judge decides each pair, and the
    decisive ones become (prompt, chosen, rejected)."""
    from datasets import Dataset

    from flywheel.arena.battles import generate_cached

    version = ctx.current_version(t, k)
    answers = {m: generate_cached(ctx.roster, ctx.store, m, ctx.validation, k, "validation")
               for m in [version, *ctx.roster.opponents]}
    battles = []
    for opp in ctx.roster.opponents:
        for p in ctx.validation:
            a, b = answers[version].get(p.id), answers[opp].get(p.id)
            if a is None or b is None or not (a.ok and b.ok):
                continue
            key = stable_id("reward-validation", version, opp, p.id)
            battles.append(Battle(battle_id=key, iteration=k, phase="validation", prompt_id=p.id, prompt=p.text,
                                  category=p.category, level=p.level, reference=p.reference, model_a=version,
                                  model_b=opp, response_a=a.text, response_b=b.text))
    rows = []
    for b, j in zip(battles, ctx.judge.judge(battles) if battles else []):
        if j.valid and j.winner in ("model_a", "model_b"):
            win, lose = (b.response_a, b.response_b) if j.winner == "model_a" else (b.response_b, b.response_a)
            rows.append({"prompt": b.prompt, "chosen": win, "rejected": lose})
    data = Dataset.from_list(rows) if rows else Dataset.from_dict({"prompt": [], "chosen": [], "rejected": []})
    return shape_for(data, ctx.roster.is_chat(t), ctx.roster.config(t).system_prompt) if rows else data


def rl_phase(ctx: Context, k: int, t: str) -> RLPhase:
    """Target ``t``'s GRPO phase of iteration ``k``: the prompts the select stage chose for its
    train battles (each once; in a conversation each user turn after the target's own earlier
    answers: ``flywheel.stages.rl_prompts``), with their references and baselines, and the reward
    ``train.rl.reward`` names; with ``train.rl.gap_pick``, the weights its picks go by."""
    made = ctx.store.latest_reward_model(t, k)
    return RLPhase(rl_prompts(ctx, k, t), build_reward(ctx.cfg.train.rl, ctx.cfg.judge, ctx.judge, t,
                                                       str(made) if made else None),
                   ctx.store.rollout_log(k, t), ctx.cfg.train.rl.max_completion_length or ctx.roster.config(t).max_new_tokens,
                   vllm_url(ctx, t), weights=pick_weights(ctx, k, t))


def vllm_url(ctx: Context, t: str) -> str | None:
    """The vLLM server target ``t``'s GRPO phase samples from (``train.rl.use_vllm``):
    ``train.rl.vllm_url``, else the target's first base URL without its ``/v1``."""
    rl = ctx.cfg.train.rl
    if not rl.use_vllm:
        return None
    urls = ctx.roster.config(t).base_urls
    url = rl.vllm_url or (urls[0] if urls else None)
    return url.rstrip("/").removesuffix("/v1") if url else None


def publish_rollouts(ctx: Context, k: int) -> None:
    """Iteration ``k``'s GRPO rollouts of every target (prompt, answer, reward, advantage, error) as
    the dataset ``iter-000k/rollouts``, with its card; the logs they were appended to go."""
    logs = {t: ctx.store.rollout_log(k, t) for t in ctx.roster.targets}
    rows = [{**r, "iteration": k, "target": t} for t, path in logs.items() if path.exists()
            for r in with_advantages(RolloutLog(path).read())]
    save_rollouts(rows, ctx.store.dataset_dir(k, "rollouts"), k, ctx.cfg.train.rl, ctx.cfg.train.method_of(k))
    for path in logs.values():
        path.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        next(iter(logs.values())).parent.rmdir()


def model_card(ctx: Context, k: int, t: str, *, base: str, res, tc, adapter: bool) -> str:
    """A Hub model card for target ``t``'s version ``k``: YAML front matter (library, base model,
    tags), then its lineage: the run, the version it was trained from, the datasets (with their
    iterations under replay or pooling), the method and the figures of the training."""
    iters = list(range(1, k + 1)) if ctx.cfg.train.replay else [k]
    used = [(i, "sft") for i in iters] + [(k, "dpo")]
    data = [str(ctx.store.dataset_dir(i, kind).relative_to(ctx.store.root)) for i, kind in used]
    method = tc.method + (" (LoRA adapter)" if adapter else " (LoRA, merged)" if tc.lora else "")
    text = (
        f"# {versioned(t, k)}\n\n"
        f"Version {k} of target `{t}`, trained by the flywheel's run `{ctx.cfg.run.name}` from `{base}`.\n\n"
        f"- method: {method}, learning rate {tc.learning_rate}, weight decay {tc.weight_decay}, "
        f"batch size {tc.batch_size}\n"
        f"- steps: {res.steps}, examples: {res.examples}, final training loss: {res.loss}\n"
        f"- data (in the run directory): {', '.join(data)}"
        f"{' (every target pooled)' if pools_traces(ctx, k) else f' (rows of target {t})'}\n"
        f"- judge: {ctx.judge.name}; opponents: {', '.join(ctx.roster.opponents)}\n"
        f"- config: {json.dumps({'train': ctx.cfg.train.model_dump(mode='json')}, sort_keys=True)}\n"
    )
    return hub_card("model", text, library_name="peft" if adapter else "transformers",
                    base_model=str(ctx.roster.path(base)),
                    tags=["trl", tc.method.replace("+", "-"), "arena-learning", "flywheel"])


def serve_adapter(ctx: Context, t: str, k: int) -> None:
    """Ask the server behind a ``serve_lora`` target to load version ``k``'s adapter (main process)."""
    if not is_main_process():
        return
    player = ctx.roster.build(ctx.roster.config(t), t)
    if not isinstance(player, ServesAdapters):
        raise ValueError(f"target {t}: serve_lora needs a player kind that serves adapters (openai against vLLM)")
    player.load_lora_adapter(versioned(t, k), str(ctx.store.model_dir(versioned(t, k)).resolve()))


def launch_training(ctx: Context, k: int, t: str, steps: int) -> TargetTraining:
    """``accelerate launch`` the training of one target (flywheel/stages/train_worker.py); its main
    process writes the result next to the stage results."""
    import subprocess
    import sys
    from pathlib import Path

    done = ctx.store.stage_json(k, f"train-{t}")
    if done is not None:
        return TargetTraining.from_json(done)
    accelerate = shutil.which("accelerate", path=str(Path(sys.executable).parent)) or shutil.which("accelerate")
    if accelerate is None:
        raise RuntimeError("train.launcher accelerate: the accelerate command is not installed")
    method = ctx.cfg.train.method_of(k)
    weighed = [mix_weights(ctx, k, t), pick_weights(ctx, k, t)]
    if any(w is not None for w in weighed):  # weighed once here; every rank reads them from the train state
        ctx.roster.pool.release()  # an opponent that answered leaves the devices to the training processes
    if samples_first(ctx.cfg.train, method):  # sampled once here; every rank reads the same groups
        own_groups(ctx, k, t, rl_phase(ctx, k, t), answer_steps(method, steps), ctx.cfg.train)
        ctx.roster.pool.release()  # the sampling player leaves the devices to the training processes
    hw = Hardware.detect()
    mixed = {"bf16": "bf16", "fp16": "fp16"}.get(precision(ctx.cfg.train, hw), "no")
    cmd = [accelerate, "launch", "--num_processes", str(ctx.cfg.train.num_processes), "--num_machines", "1",
           "--mixed_precision", mixed, "--dynamo_backend", "no"]
    cmd += [] if hw.cuda else ["--cpu"]
    cmd += ["-m", "flywheel.stages.train_worker", str(ctx.store.root), str(k), t, str(steps)]
    log.info("training %s@%d: %s", t, k, " ".join(cmd))
    proc = subprocess.run(cmd, capture_output=True, text=True)
    done = ctx.store.stage_json(k, f"train-{t}")
    if proc.returncode != 0 or done is None:
        raise RuntimeError(f"accelerate launch for {t}@{k} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return TargetTraining.from_json(done)
