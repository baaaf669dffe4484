from flywheel.worlds.tasks import CATEGORIES, GENERATORS, build_suite, take_validation


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
    the splits a run uses (flywheel.worlds.world) and for the tiny models' pre-training pool."""
    from flywheel.config.tree import FlywheelConfig
    from flywheel.worlds.world import prompt_pools

    train, evals, validation = prompt_pools(FlywheelConfig().world.tasks)
    texts = [{p.text for p in s} for s in (train, evals, validation)]
    assert not (texts[0] & texts[1] or texts[0] & texts[2] or texts[1] & texts[2])
    assert len(validation) == 18 * 10 and {p.split for p in validation} == {"validation"}
    assert {(p.category, p.level) for p in validation} == {(c, lv) for c in CATEGORIES for lv in (1, 2, 3)}
    full, _ = build_suite(1234, 250, 20)
    assert {p.text for p in train + validation} <= {p.text for p in full}  # carved out of the train pool
    assert {p.id for p in take_validation(full[::-1], 10)[1]} == {p.id for p in validation}  # by hash, not order


def test_twins_are_one_meaning_and_other_texts_mean_themselves():
    from flywheel.worlds.tasks import meaning

    assert meaning("add", "3+12=") == meaning("add", "12+3=") != meaning("add", "13+2=")
    assert meaning("mul", "7*40=") == meaning("mul", "40*7=")
    assert meaning("sort", "sort 312=") == meaning("sort", "sort 123=") != meaning("sort", "sort 1233=")
    assert meaning("count", "count a abcab=") == meaning("count", "count a bbaac=") != meaning("count", "count b abcab=")
    assert meaning("sub", "9-3=") != meaning("sub", "3-9=")  # not commutative
    assert meaning("rev", "rev abc=") != meaning("rev", "rev cba=")
    assert meaning("add", "what is 3 plus 5?") == "what is 3 plus 5?"  # a user's text: no known twin
    assert meaning("tictactoe", "x.o|...|...") == "x.o|...|..."


def test_no_meaning_is_in_two_splits_on_any_suite():
    """Held out by meaning, not by string: no eval or validation prompt has a twin (``b+a`` for
    ``a+b``, an anagram to sort or count) in another split, on the default suite and others."""
    from flywheel.config.tree import TaskSuiteConfig
    from flywheel.worlds.tasks import meaning
    from flywheel.worlds.world import prompt_pools

    for seed in (1234, 7, 99):
        splits = prompt_pools(TaskSuiteConfig(seed=seed))
        meanings = [{(p.category, meaning(p.category, p.text)) for p in s} for s in splits]
        train, evals, validation = meanings
        assert not (train & evals or train & validation or evals & validation), seed
        assert len(evals) == len(splits.eval) and len(validation) == len(splits.validation)  # one of each
        assert {(p.category, p.level) for p in splits.eval} == {(c, lv) for c in CATEGORIES for lv in (1, 2, 3)}
    # 1-digit sums have 55 meanings: 20 eval, 10 validation, and train keeps the rest with their twins
    by_cell = [p for p in prompt_pools(TaskSuiteConfig()).train if (p.category, p.level) == ("add", 1)]
    assert len({meaning("add", p.text) for p in by_cell}) == 55 - 20 - 10
    assert len(by_cell) > 55 - 20 - 10  # both texts of a twin pair that is all in train stay


def test_the_configs_category_names_are_the_suites():
    """The config names the categories (the ground stands alone); the suite makes each of them."""
    assert tuple(GENERATORS) == CATEGORIES
