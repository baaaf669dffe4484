"""The worlds a learning benchmark runs on: a task suite (``world.tasks.seed``) and a pre-training
(``world.seed``), beside the run's own seed.

Held out means new prompts and new pre-trained models, not only another run seed. The registry,
``benchmarks/worlds.yaml``, says which worlds are which: the tuning worlds, each with the choice it
steered (the embedded default's settings were chosen on :data:`TUNING`, suite 1234, pre-training 0),
and the held-out worlds, each with when it was registered and first run. A world that steers any
choice moves to tuning. Rows are labelled from the registry (:func:`standing`), never by hand; a
world it does not name counts as held out and says it is not registered. Every learning benchmark
takes ``--suites`` and ``--pretrainings`` and runs each run seed on each world (their product);
each world's tiny models are pre-trained once into their own folder under ``--models-root``
(kept between runs: ``bootstrap`` rebuilds only what is missing or stale).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from benchmarks.stats import parse_seeds

TUNING = (1234, 0)  # (world.tasks.seed, world.seed) the embedded default's settings were chosen on


@dataclass(frozen=True)
class World:
    """One task suite and one pre-training of the embedded world."""

    suite: int
    pretraining: int
    models_root: Path

    @property
    def key(self) -> tuple:
        """This world's key in the registry (see :func:`world_key`)."""
        return world_key({"suite": self.suite, "pretraining": self.pretraining})

    @property
    def held_out(self) -> bool:
        """Whether no choice was steered on this world (the registry lists it as tuning otherwise)."""
        return not is_tuning(self.key)

    @property
    def label(self) -> str:
        return f"suite {self.suite} / pre-training {self.pretraining} ({standing(self.key)})"

    @property
    def row_label(self) -> str:
        """The label of a per-run line: the world and whether it is tuning or held out (the header
        names what a tuning world steered, :attr:`label`)."""
        found = entry_of(self.key)
        side = "not registered" if found is None else "tuning" if found[0] == "tuning" else "held out"
        return f"suite {self.suite} / pre-training {self.pretraining} ({side})"

    @property
    def models_dir(self) -> Path:
        return self.models_root / f"suite{self.suite}-pretraining{self.pretraining}"

    def overrides(self) -> list[str]:
        """The config overrides that put a run on this world."""
        return [f"world.tasks.seed={self.suite}", f"world.seed={self.pretraining}", f"world.models_dir={self.models_dir}"]


REGISTRY = Path(__file__).with_name("worlds.yaml")


KEY_FIELDS = ("suite", "pretraining", "deals", "threads")  # what tells one world from another, after its kind


def registry() -> dict:
    """The registry of worlds (``benchmarks/worlds.yaml``): tuning worlds with the choice each
    steered, and held-out worlds with the purpose and run seeds they were registered for."""
    import yaml

    return yaml.safe_load(REGISTRY.read_text())


def world_key(entry: dict) -> tuple:
    """A registry entry's world: its kind (``world``: ``tasks`` where none is named, ``multiturn``,
    ``tictactoe``, ``hanabi``, ``judge_battles``: the battles benchmarks.judge_cascade draws), then
    suite, pre-training, deals and threads (None where absent)."""
    return (entry.get("world", "tasks"), *(entry.get(f) for f in KEY_FIELDS))


def entry_of(key: tuple, reg: dict | None = None) -> tuple[str, dict] | None:
    """``("tuning" | "held_out", entry)`` for the world ``key``, or None where the registry does not
    name it (a world named in both lists is an error: the tuning entry wins, and the registry's
    test fails)."""
    reg = registry() if reg is None else reg
    for side in ("tuning", "held_out"):
        for entry in reg.get(side) or []:
            if world_key(entry) == key:
                return side, entry
    return None


def is_tuning(key: tuple, reg: dict | None = None) -> bool:
    found = entry_of(key, reg)
    return found is not None and found[0] == "tuning"


def standing(key: tuple, reg: dict | None = None) -> str:
    """How the registry labels a world: ``tuning: steered X``, ``held out, registered R; first run
    C``, or that it is not registered."""
    found = entry_of(key, reg)
    if found is None:
        return "not in the registry: register it in benchmarks/worlds.yaml before reporting it as held out"
    side, entry = found
    if side == "tuning":
        return f"tuning: steered {entry['steered']}"
    return f"held out, registered {entry['registered']}; first run {entry.get('first_run', 'not yet')}"


def registered(purpose: str) -> tuple[list[tuple[int, int]], list[int]]:
    """The (suite, pre-training) pairs registered as held out for ``purpose``, and their run seeds."""
    rows = [w for w in registry()["held_out"] if w.get("purpose") == purpose]
    if not rows:
        raise SystemExit(f"--registered {purpose}: no held-out world is registered for it in {REGISTRY}")
    return [(w["suite"], w["pretraining"]) for w in rows], sorted({s for w in rows for s in w["seeds"]})


def add_world_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--suites", nargs="+", default=[str(TUNING[0])],
                    help=f"task suite seeds, world.tasks.seed (default {TUNING[0]}, the tuning suite)")
    ap.add_argument("--pretrainings", nargs="+", default=[str(TUNING[1])],
                    help=f"pre-training seeds, world.seed (default {TUNING[1]}, the tuning pre-training)")
    ap.add_argument("--models-root", default="data/models/worlds",
                    help="where each world's pre-trained tiny models are kept (one folder per world)")
    ap.add_argument("--registered", default=None, metavar="PURPOSE",
                    help="run the held-out worlds registered for PURPOSE in benchmarks/worlds.yaml, with their "
                         "run seeds (instead of --suites, --pretrainings and --seeds)")


def worlds_of(args: argparse.Namespace) -> list[World]:
    """Every (suite, pre-training) pair the arguments name, tuning world first if named."""
    root = Path(args.models_root)
    if getattr(args, "registered", None):
        pairs, seeds = registered(args.registered)
        if hasattr(args, "seeds"):
            args.seeds = [str(s) for s in seeds]
        return [World(s, p, root) for s, p in pairs]
    return [World(s, p, root) for s in parse_seeds(args.suites) for p in parse_seeds(args.pretrainings)]


def describe(worlds: list[World]) -> str:
    held = sum(w.held_out for w in worlds)
    return (f"{len(worlds)} world(s): " + "; ".join(w.label for w in worlds)
            + f"; {held} held out, {len(worlds) - held} tuning ({REGISTRY.name})")
