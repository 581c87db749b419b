"""FFN parameter arithmetic (`hf-ffn params`), read off the real modules on the meta device, not from formulas: what
a standard FFN, a gated FFN of the same width and a parameter-matched one cost at BERT-base, BERT-large and
LLaMA-2-7B sizes; and the forward FLOPs of a masked-language model (`mlm_flops`, by `FlopCounterMode`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch.utils.flop_counter import FlopCounterMode

from .configuration_ffn_bert import FfnBertConfig, parameter_matched_glu_width
from .modeling_ffn_bert import FfnBertForMaskedLM, FfnBertModel


@dataclass(frozen=True)
class Dims:
    """Model dimensions: the standard FFN's activation and width, and the gated variant compared with it."""

    name: str
    hidden_size: int
    intermediate_size: int  # the standard FFN's width (4·hidden_size for all three presets)
    num_hidden_layers: int
    num_attention_heads: int
    vocab_size: int
    max_position_embeddings: int
    hidden_act: str
    gated_ffn_type: str
    ffn_bias: bool


PRESETS: dict[str, Dims] = {
    # Devlin et al. 2019, table/sec. 3: L=12, H=768, A=12 and L=24, H=1024, A=16; FFN width 4H; vocab 30522.
    "bert-base": Dims("BERT-base", 768, 3072, 12, 12, 30522, 512, "gelu", "geglu", True),
    "bert-large": Dims("BERT-large", 1024, 4096, 24, 16, 30522, 512, "gelu", "geglu", True),
    # Touvron et al. 2023 (LLaMA 2): 32 layers, 32 heads, d=4096, vocab 32000, context 4096, SwiGLU without biases
    # (4·4096 → 11008 by the 2/3 rule); the model is an FfnBertModel at these sizes: only the FFN is LLaMA's.
    "llama-2-7b": Dims("LLaMA-2-7B dims", 4096, 16384, 32, 32, 32000, 4096, "silu", "swiglu", False),
}


@dataclass(frozen=True)
class FfnRow:
    """One FFN variant at one model size, per layer unless the name says otherwise. `ffn_flops_per_token`: matrix
    products only (a multiply-add counts 2); `ffn_share`: all layers' FFN parameters over the whole model's."""

    model: str
    ffn_type: str
    intermediate_size: int
    ffn_weights: int
    ffn_biases: int
    ffn_flops_per_token: int
    ffn_params_all_layers: int
    model_params: int
    ffn_share: float


def ffn_row(dims: Dims, ffn_type: str, intermediate_size: int) -> FfnRow:
    """Count one variant by building the whole `FfnBertModel` on the meta device."""
    sizes = {key: value for key, value in asdict(dims).items() if key not in ("name", "gated_ffn_type")}
    config = FfnBertConfig(**{**sizes, "intermediate_size": intermediate_size, "ffn_type": ffn_type})
    return config_row(config, dims.name)


def config_row(config: FfnBertConfig, name: str) -> FfnRow:
    """Count the FFN of `config`'s first layer (and all layers' FFN parameters) on the meta device; `name` fills
    `FfnRow.model`."""
    with torch.device("meta"):  # shapes only: LLaMA-2-7B sizes would need gigabytes otherwise
        model = FfnBertModel(config)
        token = torch.empty(1, 1, config.hidden_size)  # (batch, seq, hidden): one token
    mlp = model.encoder.layer[0].mlp
    weights = sum(p.numel() for key, p in mlp.named_parameters() if key.endswith("weight"))
    biases = sum(p.numel() for key, p in mlp.named_parameters() if key.endswith("bias"))
    with FlopCounterMode(display=False) as counter:
        mlp(token)
    ffn_all = sum(p.numel() for layer in model.encoder.layer for p in layer.mlp.parameters())
    total = sum(p.numel() for p in model.parameters())
    return FfnRow(
        model=name,
        ffn_type=config.ffn_types[0],
        intermediate_size=config.intermediate_size,
        ffn_weights=weights,
        ffn_biases=biases,
        ffn_flops_per_token=counter.get_total_flops(),
        ffn_params_all_layers=ffn_all,
        model_params=total,
        ffn_share=ffn_all / total,
    )


@dataclass(frozen=True)
class MlmFlops:
    """Forward FLOPs of a masked-language model, matrix products only (a multiply-add counts 2): the encoder per
    token of a block of `seq_length` tokens, the MLM head per decoded position."""

    seq_length: int
    encoder_per_token: float
    head_per_position: int

    def training_flops(self, tokens: int, decoded_positions: int) -> float:
        """FLOPs of training over `tokens` encoded tokens and `decoded_positions` rows through the MLM head: 3 ×
        forward (Kaplan et al. 2020, arXiv 2001.08361, sec. 2.1: C ≈ 6N per token, 2N forward + 4N backward)."""
        return 3.0 * (self.encoder_per_token * tokens + self.head_per_position * decoded_positions)


def mlm_flops(config: FfnBertConfig, seq_length: int) -> MlmFlops:
    """The forward FLOPs of `FfnBertForMaskedLM(config)`: its encoder run on one block of `seq_length` tokens and its
    MLM head on one position, on the meta device (padded; unpadded does the same products on the real tokens)."""
    config = type(config).from_dict({**config.to_dict(), "unpad_tokens": False, "sparse_prediction": False})
    with torch.device("meta"):
        model = FfnBertForMaskedLM(config)
        block = torch.zeros(1, seq_length, dtype=torch.long)  # (batch, seq)
        position = torch.empty(1, config.hidden_size)  # (positions, hidden)
    with FlopCounterMode(display=False) as counter:
        model.bert(input_ids=block)
    encoder = counter.get_total_flops()
    with FlopCounterMode(display=False) as counter:
        model.cls(position)
    return MlmFlops(seq_length, encoder / seq_length, counter.get_total_flops())


def param_table(preset: str) -> list[FfnRow]:
    """The standard FFN, the gated FFN at the same width and at `parameter_matched_glu_width`, for one preset.

    Raises:
        ValueError: if `preset` is not a key of `PRESETS`.
    """
    if preset not in PRESETS:
        raise ValueError(f"preset has unknown value {preset!r}; allowed: {', '.join(PRESETS)}")
    dims = PRESETS[preset]
    return [
        ffn_row(dims, dims.hidden_act, dims.intermediate_size),
        ffn_row(dims, dims.gated_ffn_type, dims.intermediate_size),
        ffn_row(dims, dims.gated_ffn_type, parameter_matched_glu_width(dims.intermediate_size)),
    ]


COLUMNS = {
    "model": "model",
    "ffn_type": "ffn_type",
    "intermediate_size": "width",
    "ffn_weights": "FFN weights / layer",
    "ffn_biases": "FFN biases / layer",
    "ffn_flops_per_token": "FFN FLOPs / token / layer",
    "ffn_params_all_layers": "FFN params (all layers)",
    "model_params": "model params",
    "ffn_share": "FFN share",
}


def format_markdown(rows: list[FfnRow]) -> str:
    """A GitHub-markdown table of `rows`, thousands separated, the share in percent."""
    lines = ["| " + " | ".join(COLUMNS.values()) + " |", "|" + "---|" * len(COLUMNS)]
    for row in rows:
        cells = []
        for key, value in asdict(row).items():
            cells.append(f"{value:.1%}" if key == "ffn_share" else f"{value:,}" if isinstance(value, int) else value)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
