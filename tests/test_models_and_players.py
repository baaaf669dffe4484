from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from flywheel.config.tree import ModelSpec, WorldConfig
from flywheel.players import SamplingParams, create_player
from flywheel.players.registry import resolve
from flywheel.worlds.tasks import build_suite
from flywheel.worlds.tinymodels import bootstrap, build_tokenizer


def test_tokenizer_is_character_level_and_round_trips(tmp_path):
    tok = build_tokenizer()
    ids = tok("rev abc=", add_special_tokens=False).input_ids
    assert len(ids) == len("rev abc=")
    assert tok.decode(ids) == "rev abc="
    tok.save_pretrained(tmp_path)
    again = AutoTokenizer.from_pretrained(tmp_path)
    assert again("12+3=<eos>", add_special_tokens=False).input_ids[-1] == again.eos_token_id
    assert again.padding_side == "left"


def test_bootstrap_is_deterministic_and_reloads_with_auto_classes(tmp_path):
    spec = [ModelSpec(name="m", steps=5, n_embd=16)]
    worlds = [WorldConfig(models_dir=tmp_path / d, models=spec, tasks={"train_per_cell": 10, "eval_per_cell": 2})
              for d in ("a", "b")]
    for w in worlds:
        bootstrap(w)
    a = AutoModelForCausalLM.from_pretrained(tmp_path / "a/m")
    b = AutoModelForCausalLM.from_pretrained(tmp_path / "b/m")
    fresh = bootstrap(WorldConfig(models_dir=tmp_path / "c", models=spec, seed=1,
                                  tasks={"train_per_cell": 10, "eval_per_cell": 2}))
    c = AutoModelForCausalLM.from_pretrained(fresh[0])
    for (name, pa), pb in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(pa, pb), name
    assert any(not torch.equal(pa, pc) for pa, pc in zip(a.parameters(), c.parameters()))
    assert bootstrap(worlds[0]) == []  # present models are not rebuilt


def test_a_model_remembers_its_suite_and_is_rebuilt_when_it_changed(tmp_path, caplog):
    import json
    import logging

    spec = [ModelSpec(name="m", steps=2, n_embd=16)]
    tasks = {"train_per_cell": 10, "eval_per_cell": 2, "val_per_cell": 2}
    world = WorldConfig(models_dir=tmp_path, models=spec, tasks=tasks)
    assert bootstrap(world) == [tmp_path / "m"]
    made = json.loads((tmp_path / "m" / "flywheel-model.json").read_text())
    assert made["made_with"]["tasks"]["eval_per_cell"] == 2 and made["made_with"]["model"]["steps"] == 2
    assert bootstrap(world) == []  # same suite and settings: kept
    other = WorldConfig(models_dir=tmp_path, models=spec, tasks={**tasks, "eval_per_cell": 3})
    with caplog.at_level(logging.INFO, logger="flywheel"):
        assert bootstrap(other) == [tmp_path / "m"]  # another eval split: its pool changed, so it is rebuilt
    assert "rebuilding" in caplog.text and "another suite or settings" in caplog.text
    assert json.loads((tmp_path / "m" / "flywheel-model.json").read_text())["fingerprint"] != made["fingerprint"]
    (tmp_path / "m" / "flywheel-model.json").unlink()  # a model from before fingerprints
    assert bootstrap(other) == [tmp_path / "m"]


def test_the_shipped_demo_models_are_what_the_embedded_default_would_pre_train_now():
    """``make demo`` starts from data/shipped-models: each must carry the fingerprint that the
    embedded world would build it with today, or a run pre-trains it anew (and the demo's table
    then depends on this machine's floats again). Stale after a change to the world or the
    pre-training: refresh with ``flywheel bootstrap --force --set world.models_dir=data/shipped-models``."""
    from flywheel.config.tree import FlywheelConfig
    from flywheel.worlds.tinymodels import _stale, fingerprint

    shipped = Path(__file__).resolve().parent.parent / "data" / "shipped-models"
    world = FlywheelConfig().world
    assert sorted(p.name for p in shipped.iterdir()) == sorted(s.name for s in world.models)
    for i, spec in enumerate(world.models):
        assert _stale(shipped / spec.name, fingerprint(world, spec, world.seed + i)) is None, spec.name
        assert (shipped / spec.name / "model.safetensors").stat().st_size > 100_000


def test_a_game_models_fingerprint_ignores_how_games_are_played_but_not_its_positions():
    from flywheel.worlds.tinymodels import fingerprint

    spec = ModelSpec(name="t", categories=["tictactoe"], steps=2)
    print_of = lambda **games: fingerprint(WorldConfig(kind="games", models=[spec], games=games), spec, 0)["fingerprint"]  # noqa: E731
    base = print_of()
    assert print_of(max_illegal=5, symmetries=True, missed_moves=True, tactics=True) == base  # not read by pre-training: no rebuild
    assert print_of(openings=[2]) != base and print_of(prompt="verbose") != base


def test_batched_left_padded_generation_matches_one_by_one(tiny_models_dir):
    _, evals = build_suite(1234, 30, 2)
    prompts = evals[:12]  # prompts of different lengths, so the batch is padded
    assert len({len(p.text) for p in prompts}) > 1
    params = SamplingParams(max_new_tokens=8)
    batched = create_player("transformers", "scribe", path=str(tiny_models_dir / "scribe"), batch_size=64)
    single = create_player("transformers", "scribe", path=str(tiny_models_dir / "scribe"), batch_size=1)
    got = batched.generate(prompts, params)
    want = single.generate(prompts, params)
    assert [g.text for g in got] == [g.text for g in want]
    assert [g.prompt_id for g in got] == [p.id for p in prompts]
    assert all(g.ok and g.player == "scribe" for g in got)


def test_registry_suggests_close_names_and_takes_module_paths():
    with pytest.raises(ValueError, match="did you mean 'transformers'"):
        resolve("transformer")
    assert resolve("flywheel.players.hf:TransformersPlayer").__name__ == "TransformersPlayer"
    with pytest.raises(ValueError, match="no attribute"):
        resolve("flywheel.players.hf:Nope")


def test_reference_loss_is_the_models_own_loss_on_the_answers(tiny_models_dir):
    """The eval loss that allocation can measure learning by: per-token NLL of the reference
    answer (and end of text) after the prompt, exactly what the model's own loss gives."""
    import torch

    from flywheel.ground.records import Prompt
    from flywheel.players.hf import TransformersPlayer

    player = TransformersPlayer("student", str(tiny_models_dir / "student"), batch_size=2)
    prompts = [Prompt("a", "12+7=", "add", 1, "19"), Prompt("b", "rev abc=", "rev", 1, "cba"),
               Prompt("c", "3*4=", "mul", 1, "12"), Prompt("d", "no reference", "plain", 1, None)]
    tok, total, n = player.tokenizer, 0.0, 0
    for p in prompts[:3]:
        a = tok(p.text, add_special_tokens=False).input_ids
        b = tok(p.reference, add_special_tokens=False).input_ids + [tok.eos_token_id]
        with torch.no_grad():
            out = player.model(input_ids=torch.tensor([a + b], device=player.model.device),
                               labels=torch.tensor([[-100] * len(a) + b], device=player.model.device))
        total += float(out.loss) * len(b)
        n += len(b)
    assert player.reference_loss(prompts) == pytest.approx(total / n, rel=1e-4)
    assert player.reference_loss(prompts[3:]) is None
