from flywheel.tasks import CATEGORIES, build_suite


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
