from flywheel.tasks import CATEGORIES, build_suite, take_validation


def _check(p):
    text = p.text.removesuffix("=")
    if p.category == "add":
        a, b = text.split("+")
        return int(a) + int(b)
    if p.category == "sub":
        a, b = text.split("-")
        return int(a) - int(b)
    if p.category == "mul":
        a, b = text.split("*")
        return int(a) * int(b)
    if p.category == "rev":
        return text.split()[1][::-1]
    if p.category == "sort":
        return "".join(sorted(text.split()[1]))
    _, c, s = text.split()
    return s.count(c)


def test_suite_has_six_categories_three_levels_and_correct_references():
    train, evals = build_suite(1234, 40, 5)
    assert len(CATEGORIES) >= 6
    assert {(p.category, p.level) for p in evals} == {(c, lv) for c in CATEGORIES for lv in (1, 2, 3)}
    for p in train + evals:
        assert p.reference == str(_check(p)), p


def test_train_and_eval_never_overlap_and_are_deterministic():
    train, evals = build_suite(1234, 250, 20)
    assert not {p.text for p in train} & {p.text for p in evals}
    assert len({p.id for p in train + evals}) == len(train + evals)
    assert build_suite(1234, 250, 20) == (train, evals)
    assert build_suite(99, 250, 20)[1] != evals


def test_no_prompt_is_in_two_splits():
    """train (battles), validation (steers the run) and eval (reported only) are disjoint, also for
    the splits a run uses (flywheel.world) and for the tiny models' pre-training pool."""
    from flywheel.config import FlywheelConfig
    from flywheel.world import prompt_pools

    train, evals, validation = prompt_pools(FlywheelConfig().world.tasks)
    texts = [{p.text for p in s} for s in (train, evals, validation)]
    assert not (texts[0] & texts[1] or texts[0] & texts[2] or texts[1] & texts[2])
    assert len(validation) == 18 * 10 and {p.split for p in validation} == {"validation"}
    assert {(p.category, p.level) for p in validation} == {(c, lv) for c in CATEGORIES for lv in (1, 2, 3)}
    full, _ = build_suite(1234, 250, 20)
    assert len(train) + len(validation) == len(full)  # carved out of the train pool
    assert {p.id for p in take_validation(full[::-1], 10)[1]} == {p.id for p in validation}  # by hash, not order
