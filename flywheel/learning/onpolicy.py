"""Learning from the target's own sampled answers: which prompts to sample (a Beta posterior of
each prompt's pass rate, its cell's rate as the prior), which groups teach (a group whose answers
all got one reward is flat: nothing to learn), and what each method trains on.

- **expert iteration** (rejection-sampling fine-tuning, STaR, ReST-EM): the passed answers of the
  groups that teach become SFT rows;
- **on-policy DPO**: in a group that teaches, each passed answer is paired with a failed one, as
  (chosen, rejected);
- **GRPO / RLOO** train on the prompts whose groups taught (dynamic sampling: the flat ones are
  replaced by others before any optimizer step sees them).

Everything here is plain data; the sampling itself is the arena's (``flywheel.arena.own_answers``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Group:
    """The ``answers`` the target sampled for one prompt (``row``: the RL prompt's dataset row,
    with ``prompt_id``, ``category``, ``prompt``) and each answer's reward (None: failed, with its
    ``errors``)."""

    row: dict
    answers: tuple[str, ...]
    rewards: tuple[float | None, ...]
    errors: tuple[str | None, ...] = ()
    round: int = 0

    @property
    def scored(self) -> list[float]:
        return [r for r in self.rewards if r is not None]

    @property
    def flat(self) -> bool:
        """All scored answers got one reward (or fewer than two were scored): no answer beats another."""
        return len(set(self.scored)) < 2

    def passed(self, at: float) -> list[str]:
        return [a for a, r in zip(self.answers, self.rewards) if r is not None and r >= at]

    def failed(self, at: float) -> list[str]:
        return [a for a, r in zip(self.answers, self.rewards) if r is not None and r < at]


@dataclass
class PromptPosterior:
    """A Beta posterior of each prompt's pass rate. A prompt not yet sampled takes its cell's
    (category x level) pooled pass rate as its prior mean, worth ``strength`` answers; before any
    answer of the cell is seen, the prior mean is 1/2 (Beta(1, 1) at the default strength 2).
    ``learnability`` is the posterior mean of p(1-p), the variance of one answer's pass: highest
    where the target passes sometimes, which is where a group's answers differ and something can
    be learnt."""

    strength: float = 2.0
    passes: dict[str, float] = field(default_factory=dict)
    tries: dict[str, float] = field(default_factory=dict)
    cell_passes: dict[str, float] = field(default_factory=dict)
    cell_tries: dict[str, float] = field(default_factory=dict)

    def update(self, prompt_id: str, cell: str, passes: float, tries: float) -> None:
        for table, key, x in ((self.passes, prompt_id, passes), (self.tries, prompt_id, tries),
                              (self.cell_passes, cell, passes), (self.cell_tries, cell, tries)):
            table[key] = table.get(key, 0.0) + x

    def prior(self, cell: str) -> tuple[float, float]:
        """The cell's Beta prior (alpha, beta): its pooled pass rate times ``strength``, smoothed by one
        pass and one failure so that a cell seen only failing (or passing) keeps some mass."""
        mean = cell_rate(self.cell_passes.get(cell, 0.0), self.cell_tries.get(cell, 0.0))
        return self.strength * mean, self.strength * (1.0 - mean)

    def beta(self, prompt_id: str, cell: str) -> tuple[float, float]:
        a, b = self.prior(cell)
        s, n = self.passes.get(prompt_id, 0.0), self.tries.get(prompt_id, 0.0)
        return a + s, b + (n - s)

    def learnability(self, prompt_id: str, cell: str) -> float:
        """E[p(1-p)] under the posterior: ab / ((a+b)(a+b+1))."""
        a, b = self.beta(prompt_id, cell)
        return a * b / ((a + b) * (a + b + 1.0))


def cell_rate(passes, tries):
    """A cell's pooled pass rate, smoothed by one pass and one failure so that a cell seen only failing
    (or passing) keeps some mass (floats, or numpy arrays of them)."""
    return (passes + 1.0) / (tries + 2.0)


def cell_of(row: dict) -> str:
    return f"{row.get('category') or ''}/{row.get('level') if row.get('level') is not None else ''}"


def pick(rows: list[dict], posterior: PromptPosterior, n: int, seen: set[str], rng,
         weights: Mapping[str, float] | None = None) -> list[dict]:
    """The ``n`` prompts not in ``seen`` with the highest learnability, each times its category's
    weight in ``weights`` (1 where it has none; ``train.rl.gap_pick``), ties broken at random
    (``rng``: a ``random.Random``)."""
    w = weights or {}
    keyed = [(-posterior.learnability(r["prompt_id"], cell_of(r)) * w.get(r.get("category") or "", 1.0),
              rng.random(), i)
             for i, r in enumerate(rows) if r["prompt_id"] not in seen]
    return [rows[i] for _, _, i in sorted(keyed)[:n]]


def expert_rows(groups: Iterable[Group], at: float) -> list[dict]:
    """Expert iteration's SFT rows: each distinct passed answer of every group that teaches (not
    flat), as (prompt, history, completion, category): the prompt's text and the messages before it."""
    return [{**_asked(g), "completion": a, "category": g.row.get("category")}
            for g in groups if not g.flat for a in dict.fromkeys(g.passed(at))]


def preference_rows(groups: Iterable[Group], at: float) -> list[dict]:
    """On-policy DPO pairs: in every group that teaches, each distinct passed answer with a distinct
    failed one, in turn, as (prompt, chosen, rejected)."""
    out: list[dict] = []
    for g in groups:
        if not g.flat:
            good, bad = dict.fromkeys(g.passed(at)), dict.fromkeys(g.failed(at))
            out += [{**_asked(g), "chosen": a, "rejected": b} for a, b in zip(good, bad)]
    return out


def _asked(g: Group) -> dict:
    """What the target was asked: the prompt's text and the messages before it (JSON; "" alone)."""
    return {"prompt": g.row["prompt_text"], "history": g.row.get("history") or ""}


@dataclass(frozen=True)
class SamplingSummary:
    """What a phase's own-answer sampling found: answers generated and failed, groups and the
    share of them flat (all passed, all failed, or one reward), and per category the mean pass rate
    of one sampled answer, the share of prompts passed by at least one of the k (pass@k), and the
    share of flat groups. ``answers`` counts every generated answer, the flat groups' too."""

    answers: int
    failed: int
    groups: int
    flat: float | None
    all_passed: int
    all_failed: int
    by_category: dict[str, dict]

    @staticmethod
    def of(groups: list[Group], at: float) -> SamplingSummary:
        cats: dict[str, list[Group]] = {}
        for g in groups:
            cats.setdefault(str(g.row.get("category") or ""), []).append(g)
        answers = sum(len(g.answers) for g in groups)
        failed = sum(r is None for g in groups for r in g.rewards)
        return SamplingSummary(
            answers=answers, failed=failed, groups=len(groups),
            flat=sum(g.flat for g in groups) / len(groups) if groups else None,
            all_passed=sum(bool(g.scored) and not g.failed(at) for g in groups),
            all_failed=sum(bool(g.scored) and not g.passed(at) for g in groups),
            by_category={c: _cell_figures(gs, at) for c, gs in sorted(cats.items())})

    def to_json(self) -> dict:
        return {"answers": self.answers, "failed": self.failed, "groups": self.groups, "flat_groups": self.flat,
                "all_passed": self.all_passed, "all_failed": self.all_failed, "by_category": self.by_category}


def keep_chances(groups: Iterable[Group], at: float) -> dict[str, float]:
    """``train.rl.thin_known``: per category ("" for rows without one), the chance that one of
    ``sft+expert``'s curated rows is kept, min(1, 4 (1 - p)), p the pass rate of the target's own
    sampled answers there: every row where it passes three answers in four or fewer, fewer rows
    the more surely it answers right (p = 0.9 keeps 0.4 of them, p = 1 none), so that the phase's
    steps go to what it does not know yet. A category none of whose answers was scored is absent
    (its rows are all kept)."""
    passes: dict[str, int] = {}
    tries: dict[str, int] = {}
    for g in groups:
        c = str(g.row.get("category") or "")
        passes[c] = passes.get(c, 0) + sum(r >= at for r in g.scored)
        tries[c] = tries.get(c, 0) + len(g.scored)
    return {c: min(1.0, 4.0 * (1.0 - passes[c] / n)) for c, n in sorted(tries.items()) if n}


def _cell_figures(groups: list[Group], at: float) -> dict:
    scored = [r for g in groups for r in g.scored]
    return {"groups": len(groups),
            "pass_rate": round(sum(r >= at for r in scored) / len(scored), 4) if scored else None,
            "pass_at_k": round(sum(bool(g.passed(at)) for g in groups) / len(groups), 4),
            "flat_groups": round(sum(g.flat for g in groups) / len(groups), 4)}



@dataclass(frozen=True)
class Outcome:
    """One group's result, as the online picker reads it: the optimizer step that sampled it (0:
    before the phase), its prompt, its passed answers and its scored ones."""

    step: int
    prompt_id: str
    passes: int
    tries: int


def outcomes_of(rollouts: Iterable[dict], at: float) -> list[Outcome]:
    """The groups of rollout rows (``group``, ``step``, ``prompt_id``, ``reward``: a phase's
    rollout log), each as an ``Outcome``; an answer without a finite reward is left out of both
    counts, as the trainer leaves it out."""
    groups: dict[str, list[dict]] = {}
    for r in rollouts:
        groups.setdefault(str(r["group"]), []).append(r)
    out = []
    for rows in groups.values():
        scored = [r["reward"] for r in rows if isinstance(r["reward"], int | float) and math.isfinite(r["reward"])]
        out.append(Outcome(int(rows[0]["step"]), str(rows[0]["prompt_id"]), sum(x >= at for x in scored), len(scored)))
    return out


class OnlinePicker:
    """Picks a GRPO or RLOO trainer's prompts a chunk (one generation batch) at a time: the
    ``per_chunk`` prompts likeliest to teach, by the posterior mean of 1 - p^k - (1-p)^k (the
    chance that k answers do not all get one reward; p the prompt's pass rate), ties broken at
    random. The posterior is ``PromptPosterior``'s (the cell's pass rate as the prior, worth
    ``strength`` answers), fed by the groups sampled before the phase and by the trainer's own as
    they are scored; each new group of a prompt halves the weight of its earlier ones, since the
    target they measured has moved on: a prompt the target has learnt stops being picked, one it
    has forgotten comes back. A prompt picked rests while half of the prompts likelier to teach than
    not (at the chunk's posterior) are picked, so that the phase does not learn a few prompts by
    heart, nor, where few prompts teach, run out of them.

    ``chunk(c, upto)`` reads only the groups of steps up to ``upto`` (never fewer than before in a
    pass), and its tie-breaks are seeded by the chunk: the same groups give the same picks, which is
    what makes a resumed phase pick as one never interrupted. ``weights``: per category, what a
    prompt's chance is multiplied by before the picks rank them (``train.rl.gap_pick``); the rest
    is read from the chances alone."""

    def __init__(self, rows: list[dict], outcomes: list[Outcome], *, k: int, per_chunk: int, seed: int,
                 strength: float = 2.0, weights: Mapping[str, float] | None = None) -> None:
        import numpy as np

        ids = [str(r["prompt_id"]) for r in rows]
        self.index = {p: i for i, p in enumerate(dict.fromkeys(ids))}  # prompt -> its posterior
        self.row_prompt = np.asarray([self.index[p] for p in ids])
        cells = {p: cell_of(r) for p, r in zip(ids, rows)}
        names = sorted(set(cells.values()))
        self.prompt_cell = np.asarray([names.index(cells[p]) for p in self.index])
        self.outcomes, self.k, self.per_chunk, self.seed, self.strength = outcomes, k, per_chunk, seed, strength
        w = weights or {}
        self.weight = np.asarray([w.get(r.get("category") or "", 1.0) for r in rows])  # per row (train.rl.gap_pick)
        self.reset()

    def reset(self) -> None:
        """Start a pass from chunk 0: nothing read, nothing picked (a resumed phase replays its picks)."""
        import numpy as np

        self.read, self.last = 0, {}  # outcomes read; row -> the chunk that last picked it
        self.passes, self.tries = np.zeros(len(self.index)), np.zeros(len(self.index))

    def beta(self, upto: int):
        """Each row's posterior (alpha, beta), once the groups of steps up to ``upto`` are read (in the
        order they came: the groups sampled before the phase, then the trainer's, step by step)."""
        import numpy as np

        while self.read < len(self.outcomes) and self.outcomes[self.read].step <= upto:
            o = self.outcomes[self.read]
            self.read += 1
            i = self.index.get(o.prompt_id)
            if i is not None:
                self.passes[i] = 0.5 * self.passes[i] + o.passes
                self.tries[i] = 0.5 * self.tries[i] + o.tries
        m = int(self.prompt_cell.max()) + 1
        cell_passes = np.bincount(self.prompt_cell, weights=self.passes, minlength=m)
        cell_tries = np.bincount(self.prompt_cell, weights=self.tries, minlength=m)
        mean = cell_rate(cell_passes, cell_tries)[self.prompt_cell]
        a = self.strength * mean + self.passes
        b = self.strength * (1.0 - mean) + self.tries - self.passes
        return a[self.row_prompt], b[self.row_prompt]

    def teach(self, upto: int):
        """Each row's posterior mean chance that k answers do not all get one reward: 1 - E[p^k] -
        E[(1-p)^k], with E[p^k] = prod over i < k of (a+i) / (a+b+i) under Beta(a, b)."""
        import numpy as np

        a, b = self.beta(upto)
        i = np.arange(self.k)[:, None]
        return 1.0 - np.prod((a + i) / (a + b + i), axis=0) - np.prod((b + i) / (a + b + i), axis=0)

    def chunk(self, c: int, upto: int) -> list[int]:
        """The row indices of chunk ``c``'s prompts, from the groups of steps up to ``upto``."""
        import numpy as np

        chance = self.teach(upto)
        rest = int((chance >= 0.5).sum()) // (2 * self.per_chunk)  # half the prompts likelier to teach than not
        score = chance * self.weight
        score[[i for i, at in self.last.items() if c - at <= rest]] = -1.0  # resting
        ties = np.random.default_rng([self.seed, c]).random(len(score))
        picked = [int(i) for i in np.lexsort((ties, -score))[:self.per_chunk]]
        for i in picked:
            self.last[i] = c
        return picked
