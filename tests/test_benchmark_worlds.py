"""benchmarks/worlds.yaml, the registry of the benchmarks' worlds, and the labels benchmarks/worlds.py
reads from it: it loads, no world is both tuning and held out, every entry says what a reader needs,
and a world's label comes from the registry."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from benchmarks.worlds import World, entry_of, registered, registry, standing, world_key


def test_the_registry_loads_and_no_world_is_both_tuning_and_held_out():
    reg = registry()
    tuning = [world_key(e) for e in reg["tuning"]]
    held = [world_key(e) for e in reg["held_out"]]
    assert len(tuning) >= 10 and len(held) >= 10
    assert set(tuning).isdisjoint(held), sorted(set(tuning) & set(held), key=str)
    assert not [k for k, n in Counter(tuning).items() if n > 1], "a tuning world listed twice"


def test_every_tuning_world_says_what_it_steered_and_every_held_out_world_when_it_was_registered():
    reg = registry()
    for entry in reg["tuning"]:
        assert entry.get("steered", "").strip(), entry
    for entry in reg["held_out"]:
        assert entry.get("registered", "").strip() and entry.get("seeds"), entry
        assert entry.get("purpose") or entry.get("benchmarks"), entry
        assert entry.get("world", "tasks") in ("tasks", "multiturn", "tictactoe", "hanabi", "judge_battles"), entry
    for entry in reg["tuning"] + reg["held_out"]:
        assert entry.get("world", "tasks") in ("tasks", "multiturn", "tictactoe", "hanabi", "judge_battles"), entry


def test_a_world_is_labelled_from_the_registry():
    root = Path("models")
    tuning = World(1234, 0, root)
    assert tuning.label.startswith("suite 1234 / pre-training 0 (tuning: steered the embedded default's settings; ")
    entry = next(e for e in registry()["tuning"] if world_key(e)[:3] == ("tasks", 1234, 0))
    assert tuning.label.endswith(f"(tuning: steered {entry['steered']})") and "(8823731)" in entry["steered"]
    steered = World(7, 1, root)  # held out when first run, then it chose the bandit defaults
    assert not steered.held_out and "tuning: steered the bandit reward" in steered.label
    rl = World(411, 21, root)
    assert rl.held_out and rl.label.endswith("(held out, registered before any run (28b4342); first run b75a56d)")
    new = World(5, 5, root)
    assert new.held_out and "not in the registry" in new.label
    # a per-run line says only which: the header (label) names what a tuning world steered
    assert tuning.row_label == "suite 1234 / pre-training 0 (tuning)" and steered.row_label.endswith("(tuning)")
    assert rl.row_label == "suite 411 / pre-training 21 (held out)" and new.row_label.endswith("(not registered)")


def test_other_kinds_of_world_are_told_apart_from_the_task_suites():
    # Hanabi run 3 (deals 77, pre-training 3) steered the marks; the multiturn models of suite 55 a
    # curation choice; tasks suite 55 / pre-training 3 is held out for the bandits.
    assert standing(("hanabi", None, 3, 77, None)).startswith("tuning: steered the views' marks")
    assert standing(("hanabi", None, 11, 211, None)).startswith("held out")
    assert standing(("multiturn", 55, 3, None, None)).startswith("tuning:")
    assert standing(("tasks", 55, 3, None, None)).startswith("held out")
    assert entry_of(("tictactoe", None, 9, None, None))[0] == "held_out"
    assert entry_of(("tictactoe", None, 5, None, None))[0] == "tuning"


def test_registered_runs_only_the_worlds_registered_before_they_ran():
    pairs, seeds = registered("rl")
    assert pairs == [(411, 21), (411, 22), (523, 21), (523, 22), (637, 21), (637, 22)] and seeds == [0]
    assert registered("smollm2_rl") == ([(809, 23)], [0, 1])
