"""Sections of the one config tree (flywheel/config/tree.py) for players, judges and Hanabi, and the strict
base every section shares. Import them from ``flywheel.config.tree``."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


Share = Annotated[float, Field(ge=0, le=1)]  # a share of something: 0 to 1


class PlayerConfig(Strict):
    name: str = Field(..., pattern=r"^[A-Za-z0-9_.-]+$", description="Player name in the arena.")
    kind: str = Field("transformers", description="transformers, openai, anthropic, vllm, or module:Class.")
    path: str | None = Field(None, description="Local weights (transformers, vllm; a target's training "
                             "base); default world.models_dir/<name>.")
    max_new_tokens: int = Field(12, ge=1, description="Generation length limit.")
    batch_size: int = Field(256, ge=1, description="Prompts per generate() call (local players).")
    temperature: float | None = Field(None, ge=0, description="Sampling temperature; unset or 0: greedy for "
                                      "local players, and no temperature is sent to an API (its default).")
    chat: Literal["auto", "on", "off"] = Field(
        "auto", description="Local players (transformers, vllm): ask through the tokenizer's chat template. auto: "
        "when the tokenizer has one (else raw text, noted in the log); on: a model without one is an error; "
        "off: raw text. API players chat, but an openai player with a path is asked as its weights read: without "
        "a chat template, raw text through /v1/completions.")
    device: str = Field("auto", description="Local players: torch device (auto: cuda when available, else cpu).")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="Local players: weights dtype (auto: bfloat16 on a GPU that supports it, else float32).")
    stop: list[str] = Field([], description="Stop strings: generation ends at the first (not included).")
    max_tokens_field: Literal["max_completion_tokens", "max_tokens"] = Field(
        "max_completion_tokens", description="openai kind: the length field sent (old servers need max_tokens).")
    # API players (openai, anthropic)
    model: str | None = Field(None, description="Model name at the API (required for anthropic; openai: unset "
                              "with a path, the server is asked for the path, each new version of a target for its "
                              "checkpoint folder, as transformers serve loads them).")
    base_urls: list[str] = Field([], description="Endpoints, balanced round-robin; empty = the vendor's API.")
    api_key_env: str | None = Field(None, description="Name of the environment variable holding the API key. "
                                    "The key itself never appears in a config.")
    system_prompt: str | None = Field(None, description="Optional system prompt (local chat players and APIs; a "
                                      "chat target's training data carries it too).")
    max_concurrency: int = Field(16, ge=1, description="Requests in flight at once.")
    timeout_s: float = Field(60.0, gt=0, description="Per-request timeout.")
    max_retries: int = Field(4, ge=0, description="Retries on 429, 5xx, timeouts and malformed bodies.")
    backoff_s: float = Field(0.5, ge=0, description="Base of the exponential backoff (full jitter).")
    max_backoff_s: float = Field(30.0, ge=0, description="Longest wait between retries (and for Retry-After).")
    price_input_per_mtok: float = Field(0.0, ge=0, description="USD per million input tokens.")
    price_output_per_mtok: float = Field(0.0, ge=0, description="USD per million output tokens.")
    learning_rate: float | None = Field(None, gt=0, description="Targets: this target's training learning "
                                        "rate (default: train.learning_rate).")
    serve_lora: bool = Field(False, description="openai kind, targets: load each new version into the vLLM "
                             "servers as a LoRA adapter named <name>@<k> (needs train.lora).")
    depth: int = Field(2, ge=1, le=12, description="minimax kind (games world): search depth in moves.")
    procedure: Literal["followups", "repeat"] = Field(
        "followups", description="procedural kind (askers): followups (the embedded world's follow-ups on the "
        "answer) or repeat (asks the first turn again: a useless asker, which the asker bandit should learn to avoid).")
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1, description="vllm kind (in-process): the fraction of "
                                          "GPU memory the engine may use (for targets, allocate.gpu_memory overrides it).")

    @field_validator("chat", mode="before")
    @classmethod
    def _yaml_on_off(cls, v: Any) -> Any:
        """YAML reads a bare on / off as a boolean."""
        return {True: "on", False: "off"}.get(v, v) if isinstance(v, bool) else v

    @model_validator(mode="after")
    def _api_needs_model(self) -> PlayerConfig:
        if self.kind in ("openai", "anthropic") and not self.model and not (self.kind == "openai" and self.path):
            need = "'model'" if self.kind == "anthropic" else "'model' (or 'path', for a server that loads it by path)"
            raise ValueError(f"player {self.name}: kind {self.kind} needs {need}")
        return self


class VerifierConfig(Strict):
    """How a verifier checks a response against the reference (see judges/verifier.py)."""

    match: Literal["exact", "numeric", "regex", "callable"] = Field(
        "exact", description="exact (up to whitespace), numeric (within a tolerance), regex, or a callable.")
    tolerance: float = Field(1e-6, ge=0, description="numeric: absolute tolerance.")
    relative_tolerance: float = Field(0.0, ge=0, description="numeric: relative tolerance.")
    pattern: str | None = Field(None, description="regex: extracts the answer (group 1, else the match); "
                                "unset = the reference is the regex.")
    function: str | None = Field(None, description="callable: 'module:function' of (response, reference) "
                                 "-> bool or score in [0, 1] (a score outside it fails the check: the battle is "
                                 "invalid).")
    extract: Literal["none", "final"] = Field(
        "none", description="What is checked: the whole response (none), or the final answer a chatty model states "
        "in it (final: \\boxed{x}, 'the answer is x', the last '= x', else the whole response). The raw response "
        "stays in the battle log.")

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                re.compile(v)
            except re.error as e:
                raise ValueError(f"not a regular expression: {e}") from None
        return v

    @model_validator(mode="after")
    def _callable_needs_function(self) -> VerifierConfig:
        if self.match == "callable" and not self.function:
            raise ValueError("match callable needs 'function' (module:function)")
        return self


class CascadeTier(Strict):
    """One judge of a cascade (see judges/cascade.py): it decides the battles it is sure of and passes
    the rest to the next tier."""

    kind: Literal["verifier", "llm", "panel", "custom"] = Field(
        ..., description="verifier (judge.verifier checks the reference), llm (player), panel (panel, aggregate) "
        "or custom (custom, options), each as the judge kind of that name.")
    price: float | None = Field(None, ge=0, description="USD this tier spends per battle it judges (both orders, "
                                "every panel member): what the cascade's reports count, and what orders the tiers. "
                                "Required, except for a verifier (free).")
    threshold: float | None = Field(None, ge=0, le=1, description="llm tiers: a verdict whose confidence (the "
                                    "probability the judge gave its verdict, from the API's log-probabilities; the "
                                    "lower of both orders) is under this goes to the next tier. Unset: no "
                                    "log-probabilities are asked for. Where the API returns none, it does not apply.")
    ties: Literal["escalate", "decide"] = Field("escalate", description="escalate: a tie goes to the next tier (a "
                                                "tie is unsure); decide: a tie both orders agree on stands.")
    second_order: Literal["always", "when_unsure"] = Field(
        "always", description="The last tier, llm: always: judge every battle in both orders; when_unsure: judge "
        "it in one order (seats drawn per battle) and in the other only where that verdict's confidence is under "
        "threshold (without a threshold or log-probabilities: never), so a sure verdict costs half, and its "
        "position bias goes unchecked.")
    player: PlayerConfig | None = Field(None, description="llm: the judge model (any player kind).")
    panel: list[PlayerConfig] = Field([], description="panel: the judge models (two or more).")
    aggregate: Literal["majority", "mean"] = Field("majority", description="panel: majority vote, or mean score.")
    template: str | None = Field(None, description="llm and panel: the prompt template (default: judge.template).")
    custom: str | None = Field(None, description="custom: 'module:Class' (a PairwiseJudge) or 'module:function'.")
    options: dict[str, Any] = Field({}, description="custom: keyword arguments of the judge class.")

    @model_validator(mode="after")
    def _kind_needs(self) -> CascadeTier:
        if self.kind == "llm" and self.player is None:
            raise ValueError("an llm tier needs its judge model (player)")
        if self.kind == "panel" and len(self.panel) < 2:
            raise ValueError("a panel tier needs two or more judge models (panel)")
        if self.kind == "custom" and not self.custom:
            raise ValueError("a custom tier needs custom ('module:Class' or 'module:function')")
        if self.price is None and self.kind != "verifier":
            raise ValueError(f"price: {self.kind} tiers need one (USD per battle the tier judges, both orders)")
        if self.threshold is not None and self.kind != "llm":
            raise ValueError(f"threshold: a {self.kind} tier gives no log-probabilities (only llm tiers do)")
        if self.second_order == "when_unsure" and self.kind != "llm":
            raise ValueError(f"second_order: a {self.kind} tier does not judge in two orders (only llm tiers do)")
        return self

    @property
    def cost(self) -> float:
        """Its price (a verifier's is 0 unless set)."""
        return self.price or 0.0

    def players(self) -> list[PlayerConfig]:
        return [self.player] if self.player is not None else list(self.panel)


class CascadeConfig(Strict):
    """judge.kind cascade: tiers of judges, cheapest first; a battle goes to the next tier only where
    the current one is unsure (judges/cascade.py, docs/judges.md#cascade)."""

    tiers: list[CascadeTier] = Field([], description="The judges in order, cheapest first; the last, the strongest "
                                     "by price, decides whatever reaches it.")
    audit_share: float = Field(0.05, ge=0, le=1, description="Share of the battles an earlier tier decided that "
                               "the last tier also judges (drawn by audit_seed), to measure each tier's agreement "
                               "with it. The earlier tier's verdict stands.")
    audit_seed: int = Field(0, description="Seed of the audit draw (a battle is audited or not by it alone).")
    min_agreement: float = Field(0.7, ge=0, le=1, description="Guard: a tier whose audited verdicts agree with the "
                                 "last tier's less often than this (from min_audits audits, over the iteration's "
                                 "rounds so far) is acted on by on_low_agreement.")
    min_audits: int = Field(20, ge=1, description="Guard: the least audits of a tier before its agreement is checked.")
    on_low_agreement: Literal["escalate", "stop"] = Field(
        "escalate", description="escalate: the tier is skipped from then on in the run (its round is judged again "
        "without it); stop: the run stops as the judge guard does (nothing learns from the round).")

    @model_validator(mode="after")
    def _ordered(self) -> CascadeConfig:
        if len(self.tiers) < 2:
            return self
        *rest, last = self.tiers
        dearer = [(i, t.cost) for i, t in enumerate(rest) if t.cost >= last.cost]
        if dearer:
            i, price = dearer[0]
            raise ValueError(f"tiers.{len(rest)}: the last tier decides what the others are unsure of, so it must be "
                             f"the strongest by price; its price {last.cost:g} is not above tiers.{i}'s {price:g}")
        early = [i for i, t in enumerate(rest) if t.second_order == "when_unsure"]
        if early:
            raise ValueError(f"tiers.{early[0]}.second_order: when_unsure is for the last tier (an earlier tier "
                             f"judges both orders to see its own position bias, and passes on what it is unsure of)")
        if last.threshold is not None and last.second_order != "when_unsure":
            raise ValueError(f"tiers.{len(rest)}.threshold: the last tier has no tier to pass a battle to (with "
                             f"second_order: when_unsure it says when to ask the second order)")
        names = [p.name for t in self.tiers for p in t.players()]
        if len(set(names)) < len(names):
            raise ValueError(f"tiers: each judge model needs its own name (repeated: "
                             f"{sorted({n for n in names if names.count(n) > 1})})")
        return self


class JudgeConfig(Strict):
    kind: Literal["verifier", "llm", "hybrid", "panel", "custom", "game", "reward_model", "cascade"] = Field(
        "verifier", description="verifier (checks the reference), llm (a player judges pairwise), hybrid "
        "(verifier where a reference exists, llm elsewhere), panel (several LLM judges), custom, game (the rules "
        "decide: world.kind games), reward_model (a reward model scores both answers; the higher wins), cascade "
        "(tiers of judges, cheapest first: judge.cascade).")
    player: PlayerConfig | None = Field(None, description="The judge model, for kinds llm and hybrid (any player kind).")
    template: str = Field("arena_hard", description="Prompt template: arena_hard, wizardarena (1-10 scores), "
                          "or a file path.")
    both_orders: bool = Field(True, description="Judge (A,B) and (B,A) to cancel position bias.")
    inconsistent: Literal["tie", "invalid"] = Field("tie", description="What an order-inconsistent pair becomes.")
    max_parse_retries: int = Field(1, ge=0, description="Re-asks for unparseable output before 'invalid'.")
    cache: bool = Field(True, description="Keep judge outputs by content hash (run.cache_dir): never judge twice.")
    verifier: VerifierConfig = Field(default_factory=VerifierConfig)
    llm_categories: list[str] = Field([], description="hybrid: categories the LLM judges even with a reference.")
    panel: list[PlayerConfig] = Field([], description="panel: the judge models (two or more).")
    aggregate: Literal["majority", "mean"] = Field("majority", description="panel: majority vote, or mean "
                                                   "score (needs a scores template).")
    custom: str | None = Field(None, description="custom: 'module:Class' (a PairwiseJudge) or "
                               "'module:function' (prompt, a, b, reference) -> 'A'|'B'|'tie'|'bothbad'.")
    options: dict[str, Any] = Field({}, description="custom: keyword arguments of the judge class.")
    reward_model: str | None = Field(None, description="reward_model: path of a reward model trained by a run "
                                     "(train.method reward): <run>/reward-models/<target>@<k>, or any "
                                     "sequence-classification checkpoint with one output.")
    reward_tie_margin: float = Field(0.02, ge=0, lt=1, description="reward_model: a tie when the reward model's "
                                     "confidence beyond a coin flip, |2 sigmoid(reward_a - reward_b) - 1|, is below "
                                     "this (it is the verdict's margin otherwise).")
    max_flip_rate: float = Field(0.5, ge=0, le=1, description="Guard: stop when more of a round's model-judged "
                                 "battles flip with the order (position bias) than this.")
    max_invalid_rate: float = Field(0.5, ge=0, le=1, description="Guard: stop when more of a round's model "
                                    "verdicts are invalid than this.")
    max_tie_rate: float = Field(0.95, ge=0, le=1, description="Guard: stop when more of a round's valid model "
                                "verdicts are ties than this (a judge that never decides teaches nothing).")
    min_verifier_agreement: float = Field(0.5, ge=0, le=1, description="Guard: stop when, on battles with a "
                                          "reference where the verifier is decisive, the model judge agrees with "
                                          "it less often than this.")
    guard_min_battles: int = Field(20, ge=1, description="Guard: the least battles a figure needs before it is "
                                   "checked (fewer are too noisy to stop a run on).")
    cascade: CascadeConfig = Field(default_factory=CascadeConfig, description="cascade: the tiers, the audit and "
                                   "the tiers' guard.")

    @model_validator(mode="after")
    def _kind_needs(self) -> JudgeConfig:
        if self.kind in ("llm", "hybrid") and self.player is None:
            raise ValueError(f"kind {self.kind} needs a judge player (judge.player)")
        if self.kind == "panel" and len(self.panel) < 2:
            raise ValueError("kind panel needs two or more judge players (judge.panel)")
        if self.kind == "custom" and not self.custom:
            raise ValueError("kind custom needs judge.custom ('module:Class' or 'module:function')")
        if self.kind == "reward_model" and not self.reward_model:
            raise ValueError("kind reward_model needs judge.reward_model (the path of a reward model)")
        if self.kind == "cascade" and len(self.cascade.tiers) < 2:
            raise ValueError(f"kind cascade needs two or more tiers (judge.cascade.tiers has {len(self.cascade.tiers)})")
        last = self.cascade.tiers[-1] if self.kind == "cascade" else None
        if last is not None and not self.both_orders and last.second_order == "when_unsure":
            raise ValueError(f"cascade.tiers.{len(self.cascade.tiers) - 1}.second_order: when_unsure needs "
                             "judge.both_orders (with both_orders false every battle is judged in one order)")
        return self


class HanabiConfig(Strict):
    """Hanabi's size, its eval teams and what its training labels read (``world.games.games: [hanabi]``;
    see flywheel/games/hanabi.py)."""

    players: int = Field(2, ge=2, le=5, description="Seats at the table (a team's size).")
    colours: int = Field(5, ge=2, le=5, description="Colours in the deck (r, y, g, b, w: the first this many).")
    ranks: int = Field(5, ge=1, le=5, description="Ranks per colour (1 to this): three 1s, one top card, two of "
                       "each rank between.")
    hand: int = Field(5, ge=1, description="Cards in each hand; hand x players must fit in the deck.")
    hints: int = Field(8, ge=1, le=9, description="Hint tokens (the maximum, and the start).")
    lives: int = Field(3, ge=1, le=9, description="Lives: a misplayed card costs one; the game ends at none.")
    teams: list[list[str]] = Field([], description="More teams for the eval leaderboard, each a list of players by "
                                   "seat (targets or opponents, one per seat); each plays every eval deal against "
                                   "every opponent's self-play team.")
    labels: Literal["knowledge", "hidden_card"] = Field(
        "knowledge", description="What the curation's rules read when they judge a move: which of a target's "
        "moves they correct, the move they put in its place, and which of the winners' moves they leave out. "
        "knowledge: only what the seat knows (what it was told of its own cards, the other hands, the "
        "fireworks, the discards, the tokens), so a label never rests on a card its view does not show: a "
        "play its hints do not prove playable, the discard of a card it can tell is the last copy of one a "
        "firework still needs, a hint that tells nothing new. hidden_card: also the seat's own cards, which "
        "its view never shows (a play that in fact misplays, the discard of a card that is in fact the last "
        "copy of one a firework still needs).")

    @model_validator(mode="after")
    def _fits(self) -> HanabiConfig:
        deck = self.colours * sum(3 if r == 1 else 1 if r == self.ranks else 2 for r in range(1, self.ranks + 1))
        if self.hand * self.players > deck:
            cards = self.hand * self.players
            raise ValueError(f"hand {self.hand} x players {self.players} = {cards} cards, but a deck "
                             f"of {self.colours} colours x ranks 1-{self.ranks} holds {deck}")
        bad = [t for t in self.teams if len(t) != self.players]
        if bad:
            raise ValueError(f"teams {bad}: a team has one player per seat ({self.players})")
        return self
