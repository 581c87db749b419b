"""The from-scratch study's fixed choices (issue 37): corpus, held-out set, model size, recipe, and its units.

Corpus: ../shared/data/pretraining (20M words of Wikipedia, 20M of Project Gutenberg books), read through
`hf_ffn.training.corpus`: documents cut at empty lines, `HELD_OUT_PERCENT` of the documents held out whole (seeded
by `SPLIT_SEED`: 85 documents, 1.06M tokens, ≥ 300k as the issue asks) and masked `EVAL_MASKINGS` times. One
WordPiece tokenizer (`SIZES["vocab_size"]`) trained once on the training documents (65.6M tokens) and shared by
every run (the tokens are cached once). A main run of `MAIN_STEPS` × 32 × 128 = 16.4M tokens reads a quarter of
the training text once: no text repeats within a run.

Size: 4 layers × hidden 128, 2 heads, standard FFN 512, vocabulary 4,096, blocks of 128, batch 32 — the size whose
step cost was measured here (README.md gives the pilot's measured seconds per step and the load during it).

Recipe: `RECIPE`, chosen by the pilot (README.md, pilots.jsonl). The learning rate of each (FFN, placement) comes
from the sweep (`SWEEP_RATES`); the FFN table runs every variant at its best rate.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

DATA_FILES = tuple(f"{kind}-{part:02d}.txt.xz" for kind in ("wiki", "books") for part in range(4))
HELD_OUT_PERCENT, SPLIT_SEED, EVAL_MASKINGS = 1, 42, 3
SIZES = {
    "hidden_size": 128,
    "num_hidden_layers": 4,
    "num_attention_heads": 2,
    "intermediate_size": 512,  # the standard FFN's; gated variants get the matched width 2/3 · 512 → 344
    "vocab_size": 4096,
    "max_seq_length": 128,
    "batch_size": 32,
}
# Issue 42, item 5: a second size, 4 layers × 256 (Turc et al. 2019's BERT-mini); its grid is `SIZE_GRIDS[256]`.
SECOND_SIZE = 256
HIDDEN_SIZES = (SIZES["hidden_size"], SECOND_SIZE)  # the model widths a unit may have (`Unit.hidden_size`)
# The optimiser and regularisation of every run (Cramming, Geiping & Goldstein 2022: no dropout, gradient clipping
# 0.5, Adam β2 0.98; BERT: weight decay 0.01, linear decay after warm-up). Masking: BERT's 15%, 80/10/10.
RECIPE = {
    "weight_decay": 0.01,
    "adam_beta2": 0.98,
    "adam_epsilon": 1e-6,
    "max_grad_norm": 0.5,
    "lr_scheduler_type": "linear",
    # initializer_range 0.05 instead of BERT-base's 0.02: with lr 4e-3 the best of the quick pilots (README.md:
    # 0.07 nats ahead of 0.02 and lr 2e-3 after 2M tokens, one seed, so within what one seed resolves)
    "config_overrides": "hidden_dropout_prob=0.0,attention_probs_dropout_prob=0.0,initializer_range=0.05",
}
MAIN_STEPS = 4000  # 4,000 × 4,096 = 16.4M tokens (issue: ≥ 16M fresh tokens per main run)
SWEEP_STEPS = 1000  # 4.1M tokens
EVAL_STEPS, SAVE_STEPS, LOGGING_STEPS = 1000, 500, 50  # one evaluation: 3 maskings of the held-out documents, 1-2 min
WARMUP_STEPS = 300  # the sweep's and the FFN table's warm-up

# Priority (issue 37): sweep → GELU vs SwiGLU → Post vs Pre → GeGLU → fine-tuning.
SWEEP_CELLS = (("gelu", "pre"), ("swiglu", "pre"), ("gelu", "post"), ("swiglu", "post"), ("geglu", "pre"))
SWEEP_CELLS += (("relu", "pre"),)
SWEEP_RATES = {"post": (5e-4, 1e-3, 2e-3), "pre": (1e-3, 2e-3, 4e-3)}
FFN_PLACEMENT = "pre"  # the FFN table's placement: the pilot's (README.md)
FFN_SEEDS = {"gelu": (0, 1, 2, 3, 4), "swiglu": (0, 1, 2, 3, 4), "geglu": (0, 1, 2), "relu": (0, 1, 2)}
PLACEMENT_FFNS = ("gelu", "swiglu")
PLACEMENT_WARMUPS = (300, 1000)  # Xiong et al. (2020) warm up for thousands of steps; hundreds at this budget
PLACEMENT_SEEDS = (0,)  # a second and third seed where the reading is decided: --seeds 1 2 --only ...
PLACEMENT_STEPS = 2000
FINETUNE_TASKS = ("rt_polarity", "cola", "stsb", "mrpc")
FINETUNE_SEEDS = (0, 1, 2)
FINETUNE_LEARNING_RATE = 1e-4  # BERT's small models (Turc et al. 2019 searched 1e-4, 5e-5, 3e-5)
# The control, one per pre-training seed of `FINETUNE_CHECKPOINT_SEEDS`: the GELU model of that seed as initialised
# (seed_by_name), never pre-trained; named by `untrained_name`. The fine-tuning table pairs each checkpoint with the
# control of its own seed, so the pre-training seeds' variance is inside its intervals (issue 42, item 4).
# Seeds 0-2 first (every FFN of the table has them), then 3-4 (GELU and SwiGLU's: the FFN table's five seeds).
UNTRAINED, FINETUNE_CHECKPOINT_SEEDS = "untrained", (0, 1, 2, 3, 4)


def untrained_name(seed: int) -> str:
    return f"{UNTRAINED}-seed{seed}"


def untrained_seed(checkpoint: str) -> int | None:
    """The pre-training seed of an untrained control's name (`untrained_name`; issue 37's single control
    "untrained" was seed 0's); None for a pre-trained checkpoint."""
    if checkpoint == UNTRAINED:
        return 0
    prefix = f"{UNTRAINED}-seed"
    return int(checkpoint.removeprefix(prefix)) if checkpoint.startswith(prefix) else None


# The pilot and the gate: one GELU model of the main recipe; it must end ≥ GATE_NATS below the [MASK]-position
# unigram floor before the grid is spent.
PILOT = {"ffn_type": "gelu", "placement": "pre", "learning_rate": 4e-3, "warmup_steps": WARMUP_STEPS}
GATE_NATS = 1.0

# Issue 42: the plateau exit, a measured outcome (README.md, "The plateau exit"; defined before any run of it). At
# every evaluation a unit scores its held-out Wikipedia and book blocks apart (each against its own [MASK]-position
# unigram floor) and records the attention weight given to the neighbouring tokens. It has left the plateau at the
# first evaluation where the mean over the two sources of (floor − [MASK] loss) is ≥ PLATEAU_EXIT_NATS.
PLATEAU_EXIT_NATS = 0.3
SOURCES = ("wiki", "books")  # a corpus part's source: the start of its file name (wiki-00.txt.xz → wiki)
PROBE_TOKENS_PER_SOURCE = 65_536  # held-out tokens scored per source at each evaluation (2,048 blocks of 32, 512 of
# 128; about 7,900 [MASK] positions: a standard error near 0.03 nats), blocks spread evenly over the source's
PROBE_ATTENTION_BLOCKS = 64  # of those, the blocks the attention weights are measured on (eager attention)
PROBE_TOKENS = 1_048_576  # an evaluation every ~1M training tokens (256 steps of 4,096 tokens)
PREPROCESSING_WORKERS = 16  # tokenizing processes, fixed on every device: the blocks depend on it (issue 42)
# `hf-ffn mlm`'s CUDA speed defaults (issue 41: torch.compile, loader workers, fixed prediction rows) stay off for
# the study's units for now: in a call of ~200 s with six units at once, each would compile its model (tens of
# seconds, not measured with six at once) and the plateau probe's eager attention would make it compile again;
# the issue's own measurements (131-142k tokens/s a unit, four at once) are of this path. Switch on with a call
# long enough to pay for the compile, after checking the probe with it.
SPEED_DEFAULTS = False

# The corpus parts the recipe and grid units read (issue 42; 39.5M training tokens an epoch): launch.py's default.
LAUNCH_PARTS = ("wiki-00.txt.xz", "wiki-01.txt.xz", "books-00.txt.xz", "books-01.txt.xz")

# The recipe units (issue 42, item 3): GELU and SwiGLU, seeds 0, 1, 2, Pre-LN, lr 4e-3, warm-up 300, 4,096 tokens a
# step, three arms (`recipe_units`), each 5,000 steps = 20.5M tokens (0.52 of an epoch of `LAUNCH_PARTS`: no text
# repeats), so that every seed can pass the gate (at 10.2M, 5 of 6 had left the plateau and 1 had passed it):
#   "blocks of 32"  : batch 128 × 32, a 16,000-step linear schedule stopped early (the runs that left the
#                     plateau after 4-6M tokens); its first 2,500 steps were run first as units of their own
#                     (`RECIPE_FIRST_STOP`, recorded), and the 5,000-step units continue their checkpoints;
#   "32, then 128"  : the same, then blocks of 128 (batch 32) from step `RECIPE_LONG_FROM` on (a sequence-length
#                     warm-up, as BERT moved from 128 to 512), continuing the blocks-of-32 unit's checkpoint at that
#                     step, so the two arms share their first 10.2M tokens and differ only after;
#   "constant, then cool-down": blocks of 32, warm-up, then a constant rate, decayed linearly to 0 over the last
#                     `RECIPE_COOLDOWN` steps (transformers' "warmup_stable_decay"; 20% of the run, as Hägele et al.
#                     2024, "Scaling Laws and Compute-Optimal Training Beyond Fixed Training Durations").
# A run cut earlier by a time limit is a record of its own (`cut_by_time_limit`, the tokens it reached).
RECIPE_SHAPE = {"max_seq_length": 32, "batch_size": 128}
RECIPE_FFNS, RECIPE_SEEDS, RECIPE_STEPS = ("gelu", "swiglu"), (0, 1, 2), 16000
RECIPE_FIRST_STOP, RECIPE_STOP, RECIPE_LONG_FROM, RECIPE_COOLDOWN = 2500, 5000, 2500, 1000
RECIPE_ARMS = ("blocks of 32", "32, then 128", "constant, then cool-down")


@dataclass(frozen=True)
class Unit:
    """One self-contained pre-training run of the study (`studies.pretraining.run.train_unit`).

    `short_block`/`short_block_steps`: a sequence-length warm-up, the first `short_block_steps` steps at blocks of
    `short_block` tokens (as many tokens a step: batch × `max_seq_length` / `short_block`), then `max_seq_length`.
    `cooldown_steps`: the schedule is warm-up, constant, then linear decay to 0 over the last `cooldown_steps`
    (None: `RECIPE`'s linear decay over `max_steps`)."""

    kind: str  # "pilot", "sweep", "ffn", "placement" or "recipe"
    ffn_type: str
    placement: str
    learning_rate: float
    warmup_steps: int
    seed: int
    max_steps: int
    max_seq_length: int = SIZES["max_seq_length"]  # tokens a block
    batch_size: int = SIZES["batch_size"]  # blocks a step
    stop_step: int | None = None  # stop here, before the end of the `max_steps` schedule (None: train it all)
    short_block: int | None = None
    short_block_steps: int = 0
    cooldown_steps: int | None = None
    hidden_size: int = SIZES["hidden_size"]  # the model's width (`model_sizes`); named only where it is not 128

    def __post_init__(self):
        if self.hidden_size not in HIDDEN_SIZES:
            raise ValueError(
                f"hidden_size {self.hidden_size}: the study's sizes are {', '.join(map(str, HIDDEN_SIZES))}"
            )
        if self.short_block is not None and (self.max_seq_length * self.batch_size) % self.short_block:
            raise ValueError(
                f"short_block {self.short_block}: must divide the {self.max_seq_length * self.batch_size} "
                "tokens of a step"
            )

    @property
    def name(self) -> str:
        shape = (self.max_seq_length, self.batch_size)  # named only where it is not the study's 128 × 32
        blocks = "" if shape == (SIZES["max_seq_length"], SIZES["batch_size"]) else f"-block{shape[0]}x{shape[1]}"
        if self.short_block is not None:
            short = self.first_phase()
            blocks = f"-block{short.max_seq_length}x{short.batch_size}to{shape[0]}x{shape[1]}at{self.short_block_steps}"
        cooldown = "" if self.cooldown_steps is None else f"-constant-cooldown{self.cooldown_steps}"
        stop = "" if self.stop_step is None else f"-stop{self.stop_step}"
        hidden = "" if self.hidden_size == SIZES["hidden_size"] else f"-hidden{self.hidden_size}"
        return (
            f"{self.kind}-{self.ffn_type}-{self.placement}{hidden}-lr{self.learning_rate:g}-warmup{self.warmup_steps}"
            f"{cooldown}{blocks}-steps{self.max_steps}{stop}-seed{self.seed}"
        )

    @property
    def arm(self) -> str:
        """The recipe arm of `RECIPE_ARMS` this unit belongs to."""
        if self.short_block is not None:
            return RECIPE_ARMS[1]
        return RECIPE_ARMS[2] if self.cooldown_steps is not None else RECIPE_ARMS[0]

    def first_phase(self) -> Unit:
        """A sequence-length warm-up's first `short_block_steps` steps, as a unit of their own (the same schedule at
        blocks of `short_block`, stopped where the long blocks start)."""
        if self.short_block is None:
            raise ValueError(f"{self.name}: no sequence-length warm-up")
        tokens = self.max_seq_length * self.batch_size
        return replace(
            self,
            max_seq_length=self.short_block,
            batch_size=tokens // self.short_block,
            short_block=None,
            short_block_steps=0,
            stop_step=self.short_block_steps,
        )

    def model_sizes(self) -> dict[str, int]:
        """The model's shape at `hidden_size`: `SIZES`' layers, its heads and standard FFN width scaled with the width
        (a head per 64, the FFN 4× wide, as BERT's sizes, Turc et al. 2019): 128 → `SIZES`' 2 heads and FFN 512;
        256 → 4 heads, FFN 1,024."""
        scale = self.hidden_size // SIZES["hidden_size"]
        return {
            "hidden_size": self.hidden_size,
            "num_hidden_layers": SIZES["num_hidden_layers"],
            "num_attention_heads": SIZES["num_attention_heads"] * scale,
            "intermediate_size": SIZES["intermediate_size"] * scale,
        }

    def settings(self) -> dict:
        return {**asdict(self), "arm": self.arm if self.kind == "recipe" else None}


def recipe_units(seeds: tuple[int, ...] = RECIPE_SEEDS) -> list[Unit]:
    """Item 3's arms (`RECIPE_ARMS`), each FFN of `RECIPE_FFNS` at the pilot's placement, rate and warm-up: seed-major
    and the two arms that share their first 10.2M tokens side by side (blocks of 32, then 32-then-128, for GELU and
    SwiGLU of seed 0 first), then the constant-then-cool-down arm."""
    common = ("recipe", PILOT["placement"], PILOT["learning_rate"], WARMUP_STEPS)
    short = {"max_seq_length": RECIPE_SHAPE["max_seq_length"], "batch_size": RECIPE_SHAPE["batch_size"]}
    long = {"max_seq_length": SIZES["max_seq_length"], "batch_size": SIZES["batch_size"]}
    units = []
    for seed in seeds:
        for ffn in RECIPE_FFNS:
            kind, placement, rate, warmup = common
            units.append(Unit(kind, ffn, placement, rate, warmup, seed, RECIPE_STEPS, **short, stop_step=RECIPE_STOP))
            units.append(
                Unit(
                    kind,
                    ffn,
                    placement,
                    rate,
                    warmup,
                    seed,
                    RECIPE_STEPS,
                    **long,
                    stop_step=RECIPE_STOP,
                    short_block=RECIPE_SHAPE["max_seq_length"],
                    short_block_steps=RECIPE_LONG_FROM,
                )
            )
    for seed in seeds:
        for ffn in RECIPE_FFNS:
            kind, placement, rate, warmup = common
            units.append(
                Unit(kind, ffn, placement, rate, warmup, seed, RECIPE_STOP, **short, cooldown_steps=RECIPE_COOLDOWN)
            )
    return units


# The grid (issue 42, item 4) runs at the arm the rule picks (README.md, "The recipe's three arms"): `GRID_ARM`,
# None until the recipe units have reported (the launcher then refuses the grid's stages). Its units are recipe units
# of that arm with another FFN, placement, rate or seed, so the recipe's own units (GELU and SwiGLU at 4e-3, seeds
# 0-2) are cells of the grid and are not run again. Rates are chosen at full length (issue 42: a rate picked on the
# plateau picks noise): seed 0 of each cell of `GRID_CELLS` at each rate of `GRID_RATES`, the lowest final [MASK]
# loss wins, bracketed: a winner at the edge of the rates tried adds the next factor of 2 beyond it
# (`bracketed_rate`); then `GRID_SEEDS` seeds at it. Post-LN is measured for GELU, at its own rates and with the
# longer warm-up Post-LN needs (Xiong et al. 2020; `GRID_WARMUP`), against GELU Pre-LN of the same seeds, in the
# placement stage (below).
# Chosen 2026-12-05 by the rule from the recipe units (README.md, "The recipe's three arms"; the 17 recorded then,
# the 18th since changes nothing): all six units of "32, then 128" left the plateau within 20.5M tokens and all six
# ended >= 1 nat below the floor at blocks of 128 (1.39-1.97); the cool-down's exits were earlier than linear
# decay's in none of the six pairs.
GRID_ARM: str | None = RECIPE_ARMS[1]
# The rates each cell starts from. The bracketing rule was written on 2026-12-05, after the lowest of Pre-LN's three
# had won for GELU and SwiGLU (README.md, "The grid's rates so far"); it adds 1e-3 for them, as was then done.
GRID_RATES = {"pre": (2e-3, 4e-3, 8e-3), "post": (5e-4, 1e-3, 2e-3)}
GRID_WARMUP = {"pre": WARMUP_STEPS, "post": 1000}
GRID_CELLS = (("gelu", "pre"), ("swiglu", "pre"), ("geglu", "pre"))  # the FFN table's, in the priority
GRID_SEEDS = {("gelu", "pre"): 5, ("swiglu", "pre"): 5, ("gelu", "post"): 3, ("geglu", "pre"): 3}
# Post-LN vs Pre-LN (item 4, one FFN: `PLACEMENT_FFN`) runs longer than the FFN table. Post-LN's three rate units
# at 20.5M tokens (warm-up 1,000; GELU Post-LN at `GRID_RATES["post"]`, recorded as the grid's cells were then)
# never left the plateau: 0.19-0.22 nats below the floor at the end, the neighbour weight ÷ uniform 1.0-1.2
# throughout (README.md, "Post-LN"), so at that length the table would compare a model that learned language with
# one that did not. Every unit of the placement table continues its 20.5M-token checkpoint to step `PLACEMENT_STOP`
# of the same 16,000-step schedule (41.0M tokens, 1.04 epochs of `LAUNCH_PARTS`): Post-LN's rate is chosen there
# (its three rate units, continued, bracketed as the grid's), then `GRID_SEEDS` seeds of Post-LN at it and of
# Pre-LN at the FFN's grid rate (`placement_stage_units`). Chosen 2026-12-05, before any unit past 20.5M tokens had
# run.
PLACEMENT_FFN, PLACEMENT_STOP = "gelu", 10_000


@dataclass(frozen=True)
class SizeGrid:
    """The grid at one model width: its (FFN, placement) `cells`, the `rates` each placement's bracketing starts from
    (`bracketed_rate`), and how many `seeds` of each cell the FFN table runs."""

    cells: tuple[tuple[str, str], ...]
    rates: dict[str, tuple[float, ...]]
    seeds: dict[tuple[str, str], int]


# Item 5, the second size: is the FFN table's answer the same one size up? 4 × 256 (4 heads, FFN 1,024; about 3.1× the
# 4 × 128 model's parameters, 4.41M against 1.40M, and its matmul FLOPs a token at blocks of 128), the grid's arm,
# Pre-LN, GELU against SwiGLU only (the first comparison), 3 seeds each, each FFN at its own rate chosen at
# full length, bracketed as the grid's. The rates start from 5e-4, 1e-3, 2e-3: a wider model takes a lower rate, and
# at 4 × 128 GELU chose 1e-3 and SwiGLU 2e-3 (5e-4 is half GELU's; a SwiGLU win at 2e-3, the top edge, tries 4e-3
# next). Run as the grid's stages with `--hidden_size 256` (launch.py); its records fill summary.json's
# `ffn_table_second_size` (`grid_cells`' kind `SECOND_SIZE_KIND`) and `plateau_exit`. Chosen 2026-12-06, before any
# unit of this size had run.
SECOND_SIZE_CELLS = (("gelu", "pre"), ("swiglu", "pre"))
SIZE_GRIDS = {
    SIZES["hidden_size"]: SizeGrid(GRID_CELLS, GRID_RATES, GRID_SEEDS),
    SECOND_SIZE: SizeGrid(SECOND_SIZE_CELLS, {"pre": (5e-4, 1e-3, 2e-3)}, dict.fromkeys(SECOND_SIZE_CELLS, 3)),
}
SECOND_SIZE_KIND = "ffn_second_size"  # the kind `grid_cells` gives the second size's main cells


def grid_unit(
    arm: str, ffn: str, placement: str, rate: float, seed: int, hidden_size: int = SIZES["hidden_size"]
) -> Unit:
    """The recipe unit of `arm` (`RECIPE_ARMS`) for this FFN, placement, rate, seed (`GRID_WARMUP`) and size."""
    if arm not in RECIPE_ARMS:
        raise ValueError(f"arm {arm!r} is not one of {', '.join(map(repr, RECIPE_ARMS))}")
    template = next(u for u in recipe_units((0,)) if u.arm == arm)
    return replace(
        template,
        ffn_type=ffn,
        placement=placement,
        learning_rate=rate,
        warmup_steps=GRID_WARMUP[placement],
        seed=seed,
        hidden_size=hidden_size,
    )


def grid_rate_units(arm: str, records: list[dict] = (), hidden_size: int = SIZES["hidden_size"]) -> list[Unit]:
    """Seed 0 of each cell of the grid at `hidden_size` (`SIZE_GRIDS`) at each rate its bracketing has reached
    (`bracketed_rate` from its `SIZE_GRIDS` rates, given the rate units in `records`), in the cells' order."""
    return [unit for cell in SIZE_GRIDS[hidden_size].cells for unit in _cell_rate(arm, cell, records, hidden_size)[0]]


def _cell_rate(
    arm: str, cell: tuple[str, str], records: list[dict], hidden_size: int = SIZES["hidden_size"]
) -> tuple[list[Unit], float | None]:
    ffn, place = cell
    return bracketed_rate(
        SIZE_GRIDS[hidden_size].rates[place], lambda rate: grid_unit(arm, ffn, place, rate, 0, hidden_size), records
    )


def ranked_loss(loss: float) -> float:
    """A final [MASK] loss as the rate choices rank it (`lowest_loss_rate`, `best_rates`): a NaN loss, a run that
    diverged, counts as the highest (`min` over raw losses would keep a NaN met first: x < NaN is False)."""
    return math.inf if math.isnan(loss) else loss


def lowest_loss_rate(units: list[Unit], records: list[dict]) -> float | None:
    """The learning rate of the unit of `units` with the lowest final [MASK] loss in `records` (`ranked_loss`);
    None until every one has reported (a rate is not chosen from some of its units)."""
    losses = {r["name"]: r["mask_loss"] for r in records}
    if not all(u.name in losses for u in units):
        return None
    return min(units, key=lambda u: ranked_loss(losses[u.name])).learning_rate


def bracketed_rate(
    rates: tuple[float, ...], unit_at: Callable[[float], Unit], records: list[dict]
) -> tuple[list[Unit], float | None]:
    """A learning rate chosen at full length, bracketed: the units of `rates` (`unit_at(rate)`), the lowest final
    [MASK] loss in `records` wins; while the winner is the lowest (highest) rate tried, half (twice) it is tried too,
    since a rate at the edge of those tried is not known to be the best. Returns the units of the rates tried so far
    (ascending) and the chosen rate (None until all have reported and the winner lies inside)."""
    rates = sorted(rates)
    while True:
        units = [unit_at(rate) for rate in rates]
        rate = lowest_loss_rate(units, records)
        if rate is None:
            return units, None
        if rate == rates[0]:
            rates.insert(0, rate / 2)
        elif rate == rates[-1]:
            rates.append(rate * 2)
        else:
            return units, rate


def grid_best_rates(
    arm: str, records: list[dict], hidden_size: int = SIZES["hidden_size"]
) -> dict[tuple[str, str], float]:
    """{(FFN, placement): the rate its rate units chose (`bracketed_rate`)} at `hidden_size`, for the cells whose
    rate is chosen."""
    chosen = {cell: _cell_rate(arm, cell, records, hidden_size)[1] for cell in SIZE_GRIDS[hidden_size].cells}
    return {cell: rate for cell, rate in chosen.items() if rate is not None}


def grid_units(arm: str, records: list[dict], hidden_size: int = SIZES["hidden_size"]) -> list[Unit]:
    """The FFN table's units at `hidden_size`: `SIZE_GRIDS`' seeds of each cell at its chosen rate
    (`grid_best_rates`), seed-major in the cells' order (stopping early leaves every cell with the same seeds); cells
    without a chosen rate are left out. Post-LN's run longer, in the placement stage (`placement_stage_units`)."""
    rates = grid_best_rates(arm, records, hidden_size)
    grid = SIZE_GRIDS[hidden_size]
    return [
        grid_unit(arm, ffn, place, rates[(ffn, place)], seed, hidden_size)
        for seed in range(max(grid.seeds[cell] for cell in grid.cells))
        for ffn, place in grid.cells
        if (ffn, place) in rates and seed < grid.seeds[(ffn, place)]
    ]


def placement_rate_units(arm: str, records: list[dict] = ()) -> tuple[list[Unit], float | None]:
    """`PLACEMENT_FFN` Post-LN's rate units (seed 0 at `GRID_RATES["post"]`; their 20.5M-token units are recorded)
    continued to `PLACEMENT_STOP`, bracketed as the grid's (`bracketed_rate`): the units so far and the chosen rate."""

    def unit_at(rate: float) -> Unit:
        return replace(grid_unit(arm, PLACEMENT_FFN, "post", rate, 0), stop_step=PLACEMENT_STOP)

    return bracketed_rate(GRID_RATES["post"], unit_at, records)


def placement_seed_units(arm: str, records: list[dict]) -> list[Unit]:
    """The placement table's units, seed-major, Post-LN first: `GRID_SEEDS` seeds of `PLACEMENT_FFN` Post-LN at the
    rate its `placement_rate_units` chose and of Pre-LN at the FFN's grid rate (`grid_best_rates`), each to
    `PLACEMENT_STOP`; none until both rates are chosen."""
    post = placement_rate_units(arm, records)[1]
    pre = grid_best_rates(arm, records).get((PLACEMENT_FFN, "pre"))
    if post is None or pre is None:
        return []
    return [
        replace(grid_unit(arm, PLACEMENT_FFN, place, rate, seed), stop_step=PLACEMENT_STOP)
        for seed in range(GRID_SEEDS[(PLACEMENT_FFN, "post")])
        for place, rate in (("post", post), ("pre", pre))
    ]


def placement_stage_units(arm: str, records: list[dict]) -> list[Unit]:
    """The launcher's placement stage: `placement_rate_units`, then `placement_seed_units` (the rate unit that won
    is its Post-LN seed 0). Each continues its 20.5M-token unit's checkpoint where one is kept
    (`run.continue_earlier`)."""
    rate_units = placement_rate_units(arm, records)[0]
    return rate_units + [u for u in placement_seed_units(arm, records) if u not in rate_units]


def grid_cells(arm: str | None, records: list[dict]) -> list[dict]:
    """The grid's main cells as the tables read them (issue 42, items 4 and 5): the records of `grid_units` at `arm` as
    kind "ffn" (the FFN table), those of `placement_seed_units` as kind "placement" (Pre − Post for one FFN, at
    `PLACEMENT_STOP`) and those of `grid_units` at `SECOND_SIZE` as kind `SECOND_SIZE_KIND` (the second size's FFN
    table); none before `arm` is chosen. The report's tables and the fine-tuning stage
    (`run.finetune_units`) read them."""
    if arm is None:
        return []
    by_name = {r["name"]: r for r in records}
    ffn = [by_name[u.name] | {"kind": "ffn"} for u in grid_units(arm, records) if u.name in by_name]
    placement = [
        by_name[u.name] | {"kind": "placement"} for u in placement_seed_units(arm, records) if u.name in by_name
    ]
    second = [
        by_name[u.name] | {"kind": SECOND_SIZE_KIND} for u in grid_units(arm, records, SECOND_SIZE) if u.name in by_name
    ]
    return ffn + placement + second


def pilot_units(max_steps: int = MAIN_STEPS) -> list[Unit]:
    return [
        Unit(
            "pilot", PILOT["ffn_type"], PILOT["placement"], PILOT["learning_rate"], PILOT["warmup_steps"], 0, max_steps
        )
    ]


def sweep_units() -> list[Unit]:
    """Each (FFN, placement) of `SWEEP_CELLS` at each rate of `SWEEP_RATES`, seed 0, `SWEEP_STEPS`."""
    return [
        Unit("sweep", ffn, placement, rate, WARMUP_STEPS, 0, SWEEP_STEPS)
        for ffn, placement in SWEEP_CELLS
        for rate in SWEEP_RATES[placement]
    ]


def best_rates(records: list[dict]) -> dict[tuple[str, str], float]:
    """{(ffn_type, placement): the sweep's learning rate with the lowest final [MASK]-position loss (`ranked_loss`)}."""
    cells: dict[tuple[str, str], list[dict]] = {}
    for record in records:
        if record["kind"] == "sweep":
            cells.setdefault((record["ffn_type"], record["placement"]), []).append(record)
    return {
        cell: min(sweep, key=lambda r: ranked_loss(r["mask_loss"]))["learning_rate"] for cell, sweep in cells.items()
    }


def ffn_units(records: list[dict], seeds: tuple[int, ...] | None = None) -> list[Unit]:
    """Each FFN of `FFN_SEEDS` at `FFN_PLACEMENT` and its best swept rate, `MAIN_STEPS`, seed-major (every
    variant's seed 0 first); a variant without a sweep yet is left out."""
    rates = best_rates(records)
    units = []
    for seed in range(max(len(s) for s in FFN_SEEDS.values())):
        for ffn, ffn_seeds in FFN_SEEDS.items():
            if (ffn, FFN_PLACEMENT) in rates and seed in ffn_seeds and (seeds is None or seed in seeds):
                units.append(
                    Unit("ffn", ffn, FFN_PLACEMENT, rates[(ffn, FFN_PLACEMENT)], WARMUP_STEPS, seed, MAIN_STEPS)
                )
    return units


def placement_units(seeds: tuple[int, ...] | None = None) -> list[Unit]:
    """GELU and SwiGLU × Post/Pre-LN × the placement's swept rates × `PLACEMENT_WARMUPS`, `PLACEMENT_STEPS`."""
    return [
        Unit("placement", ffn, placement, rate, warmup, seed, PLACEMENT_STEPS)
        for seed in (seeds or PLACEMENT_SEEDS)
        for ffn in PLACEMENT_FFNS
        for placement in ("post", "pre")
        for rate in SWEEP_RATES[placement]
        for warmup in PLACEMENT_WARMUPS
    ]
