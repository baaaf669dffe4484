"""Active evaluation sampling: the choice of pairs (flywheel/maths/active_eval.py) and the evaluate
stage with ``evaluate.sampling: active`` on a real tiny run."""

import json

import numpy as np

from flywheel.config.tree import FlywheelConfig
from flywheel.maths.active_eval import choose_round, ci_widths, fit_with_cov, uncertain_neighbours
from flywheel.run.context import close_run, open_run
from flywheel.stages.evaluate import evaluate_versions
from flywheel.stages.iteration import run_baseline
from tests.conftest import tiny_tree


def _points(pairs_won: dict[tuple[int, int], tuple[int, int]], k: int) -> np.ndarray:
    w = np.zeros((k, k))
    for (a, b), (wa, wb) in pairs_won.items():
        w[a, b], w[b, a] = wa, wb
    return w


def test_battles_go_where_the_order_is_uncertain_not_to_lopsided_pairs():
    # 0 and 1 are close and barely measured; 2 is far below both and well measured
    w = _points({(0, 1): (3, 2), (0, 2): (40, 1), (1, 2): (40, 1)}, 3)
    theta, cov = fit_with_cov(w)
    assert (0, 1) in uncertain_neighbours(theta, cov)
    chosen = choose_round(theta, cov, [(0, 1), (0, 2), (1, 2)], 10)
    assert chosen.count((0, 1)) >= 8
    # a pair with no prompts left is never chosen, and a round stops when every pair ran out
    assert choose_round(theta, cov, [(0, 1), (0, 2)], 10, available={(0, 1): 0, (0, 2): 3}) == [(0, 2)] * 3


def test_more_battles_narrow_the_intervals():
    k = 4
    few = _points({(i, j): (2, 2) for i in range(k) for j in range(i + 1, k)}, k)
    many = few * 10
    assert (ci_widths(fit_with_cov(many)[1]) < ci_widths(fit_with_cov(few)[1]) / 2).all()


def _baseline(tiny_models_dir, tmp_path, name, **evaluate):
    tree = tiny_tree(tiny_models_dir, tmp_path / "runs", evaluate=evaluate)
    tree["run"]["name"] = name
    ctx = open_run(FlywheelConfig.model_validate(tree))
    try:
        run_baseline(ctx)
    finally:
        close_run(ctx)
    return ctx


def test_active_eval_plays_fewer_battles_with_the_same_accuracies_and_resumes(tiny_models_dir, tmp_path):
    full = _baseline(tiny_models_dir, tmp_path, "full")
    active = _baseline(tiny_models_dir, tmp_path, "active", sampling="active", round_size=20, max_battles=50)
    n_full = len(full.store.battles(0, "eval"))
    battles = active.store.battles(0, "eval")
    assert n_full == 3 * 36 and len(battles) == 50  # 1 target x 3 opponents x 36 eval prompts; rounds 20, 20, 10
    assert len({(frozenset((b.model_a, b.model_b)), b.prompt_id) for b in battles}) == 50  # no pair meets twice on a prompt
    assert all("student@0" in (b.model_a, b.model_b) for b in battles)
    rounds = sorted(active.store.stage_path(0, "x").parent.glob("eval-active-r*.json"))
    assert [len(json.loads(p.read_text())["battles"]) for p in rounds] == [20, 20, 10, 0]
    # accuracy is measured on the whole eval split either way: the same figures as full sampling
    def accuracies(ctx):
        entry = json.loads(ctx.store.summary_path.read_text())["iterations"][0]
        return {m: (e["accuracy"], e["accuracy_by_category"]) for m, e in {**entry["eval"], **entry["opponents_eval"]}.items()}

    assert accuracies(active) == accuracies(full) and len(accuracies(full)) == 4
    assert any(acc > 0 for acc, _ in accuracies(full).values())
    # a resumed evaluate plays the stored rounds, nothing more
    ctx = open_run(active.cfg, resume=active.store.root)
    try:
        ctx.store.stage_path(0, "evaluate").unlink()
        evaluate_versions(ctx, 0)
    finally:
        close_run(ctx)
    assert len(ctx.store.battles(0, "eval")) == 50
