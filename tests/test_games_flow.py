"""A games-world run through the real flow: games played move by move, the rules as the judge,
self-play against earlier versions, winners' moves as datasets, win-or-draw rates in the summary
and in ``flywheel elo``."""

import json

import pytest

from flows.flywheel_flow import flywheel
from flywheel.config.tree import FlywheelConfig
from flywheel.games.rules import parse_position
from flywheel.ground.store import RunStore
from flywheel.learning.curation import load_dataset_dir
from tests.conftest import flywheel_cli


def games_tree(tmp_path, **over) -> dict:
    tree = {
        "run": {"root": str(tmp_path / "runs"), "name": "ttt", "iterations": 2, "shard_size": 16},
        "world": {"kind": "games", "models_dir": str(tmp_path / "models"),
                  "games": {"openings": [1, 2], "train_per_cell": 20, "eval_per_cell": 4, "val_per_cell": 2,
                            "pretrain_examples": 300, "symmetries": True, "missed_moves": True,
                            "tactics": True},
                  "models": [{"name": "gstudent", "categories": ["tictactoe"], "steps": 30, "n_embd": 32}]},
        "targets": [{"name": "gstudent", "max_new_tokens": 2}],
        "opponents": [{"name": "random", "kind": "random"}, {"name": "minimax", "kind": "minimax", "depth": 2}],
        "select": {"battles_per_iteration": 36, "rounds": 2, "self_play": True, "opponents": "uniform"},
        "judge": {"kind": "game"},
        "rating": {"bootstrap_rounds": 10},
        "train": {"steps": 4, "batch_size": 8},
    }
    tree.update(over)
    return tree


@pytest.fixture(scope="module")
def game_run(tmp_path_factory, harness):
    tmp = tmp_path_factory.mktemp("games")
    cfg = FlywheelConfig.model_validate(games_tree(tmp))
    flywheel(cfg.model_dump(mode="json"))
    return RunStore(tmp / "runs" / "ttt")


def test_games_are_played_judged_by_the_rules_and_self_play_meets_earlier_versions(game_run):
    battles = game_run.battles(2, "train")
    assert len(battles) == 36 and all(b.ok for b in battles)
    players = {m for b in battles for m in (b.model_a, b.model_b)}
    assert {"gstudent@1", "gstudent@0", "random", "minimax"} <= players  # @0: the self arm in iteration 2
    judgments = game_run.judgments(2, "train")
    assert {j.judge for j in judgments.values()} == {"game"}
    assert all(j.valid for j in judgments.values())
    for b in battles[:10]:
        parse_position(b.prompt)  # every battle starts from a position
        raw = json.loads(judgments[b.battle_id].raw)
        assert raw["result"] and set(raw["illegal"]) == {"a", "b"}  # (a 30-step model forfeits a lot)


def test_the_summary_reports_win_or_draw_against_each_reference(game_run):
    summary = json.loads(game_run.summary_path.read_text())
    for e in summary["iterations"]:
        ev = e["eval"][f"gstudent@{e['iteration']}"]
        assert set(ev["games"]) == {"random", "minimax"}
        for g in ev["games"].values():
            assert g["games"] > 0 and abs(g["win"] + g["draw"] + g["loss"] - 1) < 1e-3
            assert g["win_or_draw"] == pytest.approx(g["win"] + g["draw"], abs=1e-3)
        assert 0 <= ev["validation"]["accuracy"] <= 1 and ev["validation"]["prompts"] > 0
        assert "eval_loss" not in ev  # no reference answers in a games world


def test_winners_moves_are_the_datasets(game_run):
    sft = load_dataset_dir(str(game_run.dataset_dir(1, "sft")))
    assert len(sft) > 0
    for row in sft:
        pos = parse_position(row["prompt"])
        assert int(row["completion"]) in pos.legal_moves()
    card = (game_run.dataset_dir(1, "sft") / "README.md").read_text()
    assert "every move of the winner" in card and "every rotation and reflection" in card
    assert "its last move corrected by the rules" in card  # world.games.missed_moves
    assert "left a win untaken or the other side's only threat unblocked" in card  # world.games.tactics
    rules = [r for r in sft if r["source_model"] == "rules"]
    assert rules  # a 30-step model misses wins and blocks
    for row in rules:  # a win, else a cell the other side would win on (with two threats: the one it won on)
        pos = parse_position(row["prompt"])
        assert int(row["completion"]) in (pos.winning_moves() or pos.threats())
    from flywheel.games.referee import replay

    played = {ply.position.text("terse") for b in game_run.battles(1, "train")
              for ply in replay(b.prompt, b.response_a, b.response_b).plies}
    assert any(row["prompt"] not in played for row in sft)  # images of played positions (world.games.symmetries)


def test_elo_shows_versions_against_the_reference_players(game_run):
    out = flywheel_cli("elo", game_run.root, "--format", "json")
    assert out.returncode == 0, out.stderr
    rows = {r["model"]: r for r in json.loads(out.stdout)}
    assert set(rows) == {"gstudent@0", "gstudent@1", "gstudent@2", "random", "minimax"}
    assert {"wd_vs_random", "wd_vs_minimax"} <= set(rows["gstudent@2"])
    table = flywheel_cli("elo", game_run.root).stdout
    assert "wd_vs_minimax" in table.splitlines()[0]
