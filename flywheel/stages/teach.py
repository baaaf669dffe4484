"""teach: after an iteration's battles, opponents teach the targets (``select.teaching``;
flywheel/arena/teaching.py says how a lesson is given and scored). Each round's lessons are
written whole to ``teaching/iter-000k-rN.jsonl``, then each target's teacher bandits to
``teaching/bandits/``; a run killed in between resumes from the file (the generations are cached,
so a round killed before it replays to the same answers), and a bandit already saved has learnt
the round: nothing is lost or counted twice."""

from __future__ import annotations

from flywheel.arena import teaching
from flywheel.arena.battles import generate_cached
from flywheel.arena.teaching import LessonPlan, Teachers, TeachingRound
from flywheel.ground.atomic import atomic_write_json
from flywheel.ground.records import Generation, Lesson, base_name
from flywheel.run.context import Context, stage
from flywheel.run.results import TeachResult

PHASE = "teach"  # the usage log's phase of the lessons' generations


def teachers_of(ctx: Context) -> list[str]:
    """The configured teachers (``select.teaching.teachers``), or every opponent."""
    return list(ctx.cfg.select.teaching.teachers) or list(ctx.roster.opponents)


def load_teachers(ctx: Context, target: str, k: int, rnd: int) -> Teachers:
    """The target's teacher bandits after the latest teaching round before (k, rnd), or fresh ones."""
    cfg = ctx.cfg.select.teaching
    state = ctx.store.latest_teacher_state(target, (k, rnd))
    if state is None:
        return Teachers.new(cfg, list(ctx.pool_by_cell), teachers_of(ctx))
    out = Teachers.from_state(state)
    out.add_cells(cfg, list(ctx.pool_by_cell))
    return out


def give_lessons(ctx: Context, plans: list[LessonPlan], this: TeachingRound) -> list[Lesson]:
    """Play the planned lessons: each teacher answers its examples, the target its siblings alone
    and after the examples; every answer goes through the generation cache."""
    examples: dict[str, Generation] = {}
    for teacher in dict.fromkeys(p.teacher for p in plans):
        mine = [p for p in plans if p.teacher == teacher]
        gens = generate_cached(ctx.roster, ctx.store, teacher, [p.example for p in mine], this.k, PHASE)
        examples.update({p.lesson_id: gens[p.example.id] for p in mine})
    student = this.target
    alone = generate_cached(ctx.roster, ctx.store, student, [p.sibling for p in plans], this.k, PHASE)
    shots = {p.lesson_id: teaching.one_shot(p.example, examples[p.lesson_id].text, p.sibling) for p in plans}
    taught = generate_cached(ctx.roster, ctx.store, student, [shots[p.lesson_id] for p in plans
                                                              if examples[p.lesson_id].ok], this.k, PHASE)
    skipped = Generation(student, "", "", "the teacher's example failed")
    return [teaching.grade(p, this, examples[p.lesson_id], alone[p.sibling.id],
                           taught.get(shots[p.lesson_id].id, skipped), ctx.correct) for p in plans]


@stage("teach", TeachResult, per_round=True)
def teach_round(ctx: Context, k: int, rnd: int) -> TeachResult:
    """Teaching round ``rnd`` of iteration ``k`` for every target; then the teacher bandits learn
    each lesson's reward (once: a saved state marks the round learnt)."""
    cfg = ctx.cfg.select.teaching
    if ctx.store.lessons_path(k, rnd).exists():
        lessons = ctx.store.lessons(k, rnd)
    else:
        lessons = []
        for t in ctx.roster.targets:
            this = TeachingRound(ctx.current_version(t, k), cfg.lessons, k, rnd, ctx.cfg.run.seed)
            lessons += give_lessons(ctx, teaching.plan_lessons(load_teachers(ctx, t, k, rnd), ctx.pool_by_cell,
                                                               this), this)
        ctx.store.write_lessons(k, rnd, lessons)
    for t in ctx.roster.targets:
        path = ctx.store.teacher_bandit_path(t, k, rnd)
        if not path.exists():
            bandits = load_teachers(ctx, t, k, rnd)
            bandits.update([x for x in lessons if base_name(x.target) == t])
            atomic_write_json(path, bandits.state())
    per_target = {t: sum(1 for x in lessons if base_name(x.target) == t) for t in ctx.roster.targets}
    lifts = {name: {"lessons": v.lessons, "without": round(v.without, 4), "with": round(v.with_example, 4),
                    "lift": round(v.lift, 4)} for name, v in teaching.teacher_lifts(lessons).items()}
    return TeachResult(per_target, sum(1 for x in lessons if x.error), lifts)


def taught_sft(ctx: Context, k: int) -> list:
    """Iteration ``k``'s SFT rows from teaching: per target, the lessons with the largest lift
    (``select.teaching.sft``, ``min_lift``) as the target's own answers to the siblings asked alone."""
    cfg = ctx.cfg.select.teaching
    if not cfg.enabled or cfg.sft == 0:
        return []
    return [teaching.lesson_sft(x) for x in teaching.best_lessons(ctx.store.lessons(k), cfg.sft, cfg.min_lift)]
