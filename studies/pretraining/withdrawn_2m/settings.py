"""The pre-training study's fixed choices: model size, corpus, optimiser, and the runs of each study.

Size. 4 layers × hidden 128, 2 heads, standard FFN 512 (BERT's 4 × hidden), vocabulary 4,096, blocks of 128
tokens, batch 32. Chosen from a measured cost per step (2 threads, one process, side by side): BERT-mini's shape
(4 × 256, FFN 1024, vocabulary 8,192) takes 0.88 s a step, this size 0.33 s (0.37 s inside Trainer). The session
that ran the study had about two hours of one process for both studies and the fine-tuning; at this size that
is 15 Study A runs of 500 steps (about 3.6 minutes each) and 24 Study B runs of 150 steps (about 1.2 minutes each).
The full plan of issue 31 (about 8 hours) would give each Study A run 5× the steps: the runners take
`--max_steps` and `--seeds` (a run's name carries its steps and seed, so a longer budget adds new runs).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from hf_ffn.configuration_ffn_bert import FfnBertConfig

SIZES = {
    "hidden_size": 128,
    "num_hidden_layers": 4,
    "num_attention_heads": 2,
    "intermediate_size": 512,  # the standard FFN's; gated variants get the matched width 2/3 · 512 → 344
    "vocab_size": 4096,
    "max_seq_length": 128,
    "batch_size": 32,
}
# ../shared/data: 65 State of the Union addresses and WikiText-2's validation and test splits cut into articles.
CORPUS = ("state_union", "wikitext2/wiki.valid.tokens", "wikitext2/wiki.test.tokens")
DOCUMENT_START = r"^ = [^=]"
VALIDATION_PERCENT, SPLIT_SEED = 10, 42
# BERT's optimiser (Devlin et al. 2019, app. A.2): AdamW, weight decay 0.01, ε 1e-6, linear decay, clipping at 1.
RUN_DEFAULTS = {"weight_decay": 0.01, "adam_epsilon": 1e-6, "max_grad_norm": 1.0, "logging_steps": 10}

STUDY_A_VARIANTS = ("relu", "gelu", "geglu", "swiglu", "reglu")
STUDY_A = {"seeds": (0, 1, 2), "max_steps": 500, "learning_rate": 1e-3, "warmup_ratio": 0.1, "eval_steps": 50}
STUDY_B_FFNS = ("gelu", "swiglu")
STUDY_B = {
    "seeds": (0,),
    "max_steps": 150,
    "learning_rates": (1e-3, 3e-3, 1e-2),
    "warmup_ratios": (0.0, 0.1),
    "eval_steps": 50,
}


@dataclass(frozen=True)
class Run:
    """One pre-training run of a study."""

    study: str
    ffn_type: str
    layer_norm_position: str
    learning_rate: float
    warmup_ratio: float
    seed: int
    max_steps: int
    eval_steps: int

    @property
    def name(self) -> str:
        return (
            f"{self.study}-{self.ffn_type}-{self.layer_norm_position}-lr{self.learning_rate:g}"
            f"-warmup{self.warmup_ratio:g}-steps{self.max_steps}-seed{self.seed}"
        )

    def settings(self) -> dict:
        return asdict(self)


def study_runs(study: str, seeds: tuple[int, ...] | None = None, max_steps: int | None = None) -> list[Run]:
    """The runs of study "a" (every FFN of `STUDY_A_VARIANTS`, Post-LN, one recipe, seeds) or "b" (GELU and
    SwiGLU × Post/Pre × learning rate × warm-up), seed-major: the first seed of every cell first."""
    if study == "a":
        cells = [("a", ffn, "post", STUDY_A["learning_rate"], STUDY_A["warmup_ratio"]) for ffn in STUDY_A_VARIANTS]
        plan = STUDY_A
    elif study == "b":
        cells = [
            ("b", ffn, position, lr, warmup)
            for ffn in STUDY_B_FFNS
            for position in ("post", "pre")
            for warmup in STUDY_B["warmup_ratios"]
            for lr in STUDY_B["learning_rates"]
        ]
        plan = STUDY_B
    else:
        raise ValueError(f"study must be 'a' or 'b', got {study!r}")
    return [
        Run(*cell, seed=seed, max_steps=max_steps or plan["max_steps"], eval_steps=plan["eval_steps"])
        for seed in (seeds or plan["seeds"])
        for cell in cells
    ]


def model_config(ffn_type: str, layer_norm_position: str, **sizes) -> FfnBertConfig:
    """The FfnBertConfig of one variant: BERT's GELU as hidden_act (the MLM head's), `ffn_type` for the FFN."""
    return FfnBertConfig(ffn_type=ffn_type, hidden_act="gelu", layer_norm_position=layer_norm_position, **sizes)
