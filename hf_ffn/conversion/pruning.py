"""Inherited width (`init="pruned"`): a gated FFN narrower than its source starts from the function-preserving
full-width conversion, keeps the units that matter most on calibration text and gets its down projection refitted in
closed form (Kwon et al. 2022, "A Fast Post-Training Pruning Framework for Transformers"; Minitron, Muralidharan et
al. 2024). Per layer, x is the *teacher's* FFN input (n tokens × hidden), y the source FFN's output:

    features     f(x) = act(gate_proj x) · up_proj x            (n, I)
    scores       `IMPORTANCE_SCORES`, d_j = down_proj.weight[:, j] (wanda: Sun et al. 2023)
    keep         the `width` units of largest score (`top_units`)
    down_proj    ridge least squares  min ‖[F 1] W − y‖² + λ ‖W_F‖², λ = ridge · trace(FᵀF) / k, solved from the
                 accumulated float64 Gram matrix (`GramStatistics`, `solve_down`): memory does not grow with n.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..checkpoints import load_pretrained
from ..configuration_ffn_bert import is_gated, parameter_matched_glu_width
from ..families import checkpoint_family
from ..modeling_ffn_bert import FfnBertModel, FfnBertPreTrainedModel
from ..training.blocks import mlm_blocks
from ..training.readers import read_text_documents
from .loader import load_converted
from .report import ConversionReport

IMPORTANCE_SCORES = {
    "magnitude": "mean |f_j| · ‖down_proj[:, j]‖₂ (mean absolute activation times the down column's norm)",
    "energy": "sqrt(mean f_j²) · ‖down_proj[:, j]‖₂ (second moment: the RMS of the unit's output contribution)",
    "wanda": "‖f_j‖₂ · Σ_i |down_proj[i, j]| (Wanda, Sun et al. 2023, summed over the down projection's outputs)",
}
DEFAULT_SCORE = "magnitude"
FEATURE_CHUNK = 4096  # tokens per feature chunk: 4096 × I × 4 bytes (25 MB at I = 1536)


def calibration_ids(
    paths: list[str], tokenizer, block: int = 128, tokens: int = 65536, argument: str = "--calibration_files"
) -> torch.Tensor:
    """Calibration blocks (count, `block`) of token ids from the text files/folders `paths`, evenly spaced over the
    text, at most `tokens` tokens.

    Raises:
        FileNotFoundError, ValueError: missing or empty files (naming `argument`); text shorter than one block.
    """
    blocks = mlm_blocks([text for _, text in read_text_documents(paths, argument=argument)], tokenizer, block)
    if len(blocks) == 0:
        raise ValueError(f"{argument}: the text is shorter than one block of {block} tokens")
    ids = torch.tensor(blocks["input_ids"])
    count = max(1, min(len(ids), tokens // block))
    return ids[torch.linspace(0, len(ids) - 1, count).round().long()]


def ffn_features(mlp: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """(..., hidden) → (..., intermediate): what the FFN feeds its down projection."""
    if hasattr(mlp, "gate_proj"):
        return mlp.act_fn(mlp.gate_proj(x)) * mlp.up_proj(x)
    return mlp.act_fn(mlp.up_proj(x))


@dataclass
class GramStatistics:
    """Float64 sums over tokens for one FFN: `gram` = [F 1]ᵀ[F 1] (I+1, I+1), `cross` = [F 1]ᵀ y (I+1, hidden),
    `abs_sum` = Σ|F| (I,), `count` tokens, `target_energy` = Σ y²."""

    gram: torch.Tensor | None = None
    cross: torch.Tensor | None = None
    abs_sum: torch.Tensor | None = None
    count: int = 0
    target_energy: float = 0.0

    @torch.no_grad()
    def add(self, features: torch.Tensor, targets: torch.Tensor) -> None:
        """features (n, I), targets (n, hidden)."""
        f = torch.cat([features.double(), features.new_ones(len(features), 1, dtype=torch.float64)], dim=1)
        y = targets.double()
        if self.gram is None:
            self.gram, self.cross, self.abs_sum = f.T @ f, f.T @ y, features.double().abs().sum(0)
        else:
            self.gram += f.T @ f
            self.cross += f.T @ y
            self.abs_sum += features.double().abs().sum(0)
        self.count += len(features)
        self.target_energy += float(y.pow(2).sum())


@torch.no_grad()
def accumulate(
    mlp: nn.Module,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    stats: GramStatistics | None = None,
    chunk: int = FEATURE_CHUNK,
) -> GramStatistics:
    """`GramStatistics` of `mlp`'s features on `inputs` (n, hidden) against `targets` (n, hidden), in chunks."""
    stats = stats or GramStatistics()
    for x, y in zip(inputs.split(chunk), targets.split(chunk), strict=False):
        stats.add(ffn_features(mlp, x.to(mlp.up_proj.weight.dtype)), y)
    return stats


def importance_scores(stats: GramStatistics, down_weight: torch.Tensor, score: str = DEFAULT_SCORE) -> torch.Tensor:
    """One score per hidden unit (I,), float64, from the statistics and down_proj.weight (hidden, I).

    Raises:
        ValueError: an unknown `score` (allowed: `IMPORTANCE_SCORES`).
    """
    if score not in IMPORTANCE_SCORES:
        raise ValueError(f"importance score {score!r} is unknown; allowed: {', '.join(IMPORTANCE_SCORES)}")
    units = down_weight.shape[1]
    second = torch.diagonal(stats.gram)[:units] / stats.count  # mean f_j²
    d = down_weight.double()
    if score == "magnitude":
        return stats.abs_sum / stats.count * d.norm(dim=0)
    if score == "energy":
        return second.sqrt() * d.norm(dim=0)
    return (second * stats.count).sqrt() * d.abs().sum(0)


def top_units(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Indices (k,) of the `k` largest scores, in increasing order.

    Raises:
        ValueError: `k` not in 1..len(scores).
    """
    if not 1 <= k <= len(scores):
        raise ValueError(f"width {k} must be between 1 and the source width {len(scores)}")
    return torch.topk(scores, k).indices.sort().values


def _with_bias(stats: GramStatistics, keep: torch.Tensor | None) -> torch.Tensor:
    """The indices of the units `keep` (all when None) and of the constant (bias) column."""
    units = stats.gram.shape[0] - 1
    return torch.cat([torch.arange(units) if keep is None else keep, torch.tensor([units])])


def solve_down(
    stats: GramStatistics,
    keep: torch.Tensor | None = None,
    ridge: float = 1e-4,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Ridge least-squares down projection for the units `keep` (all when None), as in the module docstring.
    Returns (weight (hidden, k), bias (hidden,)), float64.

    Raises:
        ValueError: a negative `ridge`; torch.linalg.LinAlgError if the system is singular (ridge 0, rank-deficient).
    """
    if ridge < 0:
        raise ValueError(f"ridge must be >= 0, got {ridge}")
    index = _with_bias(stats, keep)
    gram = stats.gram[index][:, index].clone()
    k = len(index) - 1
    penalty = ridge * torch.diagonal(gram)[:k].sum() / k
    gram[torch.arange(k), torch.arange(k)] += penalty
    solution = torch.linalg.solve(gram, stats.cross[index])  # (k+1, hidden)
    return solution[:k].T.contiguous(), solution[k].contiguous()


@torch.no_grad()
def relative_error(
    stats: GramStatistics, weight: torch.Tensor, bias: torch.Tensor, keep: torch.Tensor | None = None
) -> float:
    """‖[F 1] W − y‖² / ‖y‖² from the statistics alone (W = [weightᵀ; bias])."""
    index = _with_bias(stats, keep)
    w = torch.cat([weight.double().T, bias.double()[None]], dim=0)  # (k+1, hidden)
    gram, cross = stats.gram[index][:, index], stats.cross[index]
    residual = (w * (gram @ w)).sum() - 2 * (w * cross).sum() + stats.target_energy
    return float(residual / stats.target_energy)


@torch.no_grad()
def narrow_mlp(mlp: nn.Module, keep: torch.Tensor, down_weight: torch.Tensor, down_bias: torch.Tensor) -> None:
    """Narrow `mlp` in place to the units `keep`: gate/up rows selected, down_proj set to (hidden, k), (hidden,)."""
    dtype = mlp.down_proj.weight.dtype
    for name in ("gate_proj", "up_proj"):
        old = getattr(mlp, name, None)
        if old is None:
            continue
        new = nn.Linear(old.in_features, len(keep), bias=old.bias is not None, dtype=dtype)
        new.weight.copy_(old.weight[keep])
        if old.bias is not None:
            new.bias.copy_(old.bias[keep])
        setattr(mlp, name, new)
    down = nn.Linear(len(keep), mlp.down_proj.out_features, bias=mlp.down_proj.bias is not None, dtype=dtype)
    down.weight.copy_(down_weight)
    if down.bias is not None:
        down.bias.copy_(down_bias)
    mlp.down_proj = down


@torch.no_grad()
def teacher_ffn_statistics(
    student: FfnBertModel, teacher: FfnBertModel, input_ids: torch.Tensor, batch_blocks: int = 16
) -> list[GramStatistics]:
    """One pass of `teacher` over `input_ids` (blocks, seq): each student FFN's statistics on its teacher FFN's
    input and output."""
    stats = [GramStatistics() for _ in student.encoder.layer]
    hooks = []
    for i, (t_layer, s_layer) in enumerate(zip(teacher.encoder.layer, student.encoder.layer, strict=False)):

        def hook(module, args, output, mlp=s_layer.mlp, i=i):
            accumulate(mlp, args[0].reshape(-1, args[0].shape[-1]), output.reshape(-1, output.shape[-1]), stats[i])

        hooks.append(t_layer.mlp.register_forward_hook(hook))
    try:
        for start in range(0, len(input_ids), batch_blocks):
            teacher(input_ids=input_ids[start : start + batch_blocks])
    finally:
        for handle in hooks:
            handle.remove()
    return stats


@torch.no_grad()
def prune_model(
    student: FfnBertModel,
    teacher: FfnBertModel,
    input_ids: torch.Tensor,
    width: int,
    score: str = DEFAULT_SCORE,
    ridge: float = 1e-4,
) -> list[dict]:
    """Narrow every FFN of `student` (base model) to `width` units by `score` and refit down_proj; sets
    `config.intermediate_size`. Returns one record per layer (the FFN output's relative squared error before/after)."""
    stats = teacher_ffn_statistics(student, teacher, input_ids)
    records = []
    for i, (layer, s) in enumerate(zip(student.encoder.layer, stats, strict=False)):
        down = layer.mlp.down_proj
        before = relative_error(s, down.weight, down.bias)
        keep = top_units(importance_scores(s, down.weight, score), width)
        weight, bias = solve_down(s, keep, ridge)
        narrow_mlp(layer.mlp, keep, weight, bias)
        records.append(
            {
                "layer": i,
                "kept": len(keep),
                "tokens": s.count,
                "ffn_rel_error_full_width": before,
                "ffn_rel_error": relative_error(s, weight, bias, keep),
            }
        )
    student.config.intermediate_size = width
    return records


def load_pruned(
    checkpoint: str,
    model_class: type[FfnBertPreTrainedModel],
    *,
    input_ids: torch.Tensor,
    ffn_type: str | list[str] | None = None,
    width: str | int = "matched",
    score: str = DEFAULT_SCORE,
    ridge: float = 1e-4,
    **from_pretrained_kwargs,
) -> tuple[FfnBertPreTrainedModel, ConversionReport]:
    """`init="pruned"`: `load_converted(init="preserving")`, then `prune_model` to `width` ("matched" or an int below
    the source width) on the calibration blocks `input_ids` (blocks, seq).

    Raises:
        ValueError: as `load_converted`; a standard (non-gated) target; a width not below the source's; an
            unknown `score`; `input_ids` not a (blocks, seq) tensor with at least one block.
    """
    if score not in IMPORTANCE_SCORES:
        raise ValueError(f"--prune_score {score!r} is unknown; allowed: {', '.join(IMPORTANCE_SCORES)}")
    if input_ids.dim() != 2 or len(input_ids) == 0:
        raise ValueError(f"init='pruned' needs calibration blocks (blocks, seq); got shape {tuple(input_ids.shape)}")
    model, report = load_converted(
        checkpoint, model_class, ffn_type=ffn_type, init="preserving", width="keep", **from_pretrained_kwargs
    )
    source_width = model.config.intermediate_size
    if not all(is_gated(t) for t in model.config.ffn_types):
        raise ValueError(
            f"init='pruned' narrows gated FFNs; ffn_type {ffn_type!r} has a standard layer "
            f"(allowed: a GLU-family name such as swiglu, geglu)"
        )
    new_width = parameter_width(width, source_width)
    teacher_class = checkpoint_family(checkpoint).same_head(FfnBertModel)  # a RoBERTa's: FfnRobertaModel
    teacher = load_pretrained(teacher_class, checkpoint, add_pooling_layer=False)[0].eval()
    layers = prune_model(model.base_model, teacher, input_ids, new_width, score, ridge)
    report.init = "pruned"
    report.config_changes["intermediate_size"] = [source_width, new_width]
    for entry, record in zip(report.layers, layers, strict=False):
        entry.update(
            recipe="pruned",
            note=f"{entry['note']}; kept {record['kept']} of {source_width} units by "
            f"{score} score, down_proj ridge least squares (relative squared error of the FFN output on "
            f"{record['tokens']} calibration tokens: {record['ffn_rel_error']:.4g})",
            pruning=record,
        )
    report.exact = False
    return model, report


def parameter_width(width: str | int, source_width: int) -> int:
    """The pruned width: "matched" (`parameter_matched_glu_width`) or an int below the source (else ValueError)."""
    new = parameter_matched_glu_width(source_width) if width == "matched" else width
    if isinstance(new, bool) or not isinstance(new, int) or not 0 < new < source_width:
        raise ValueError(f"init='pruned' needs width 'matched' or an integer in 1..{source_width - 1}, got {width!r}")
    return new


__all__ = [
    "DEFAULT_SCORE",
    "IMPORTANCE_SCORES",
    "GramStatistics",
    "accumulate",
    "ffn_features",
    "importance_scores",
    "load_pruned",
    "narrow_mlp",
    "parameter_width",
    "prune_model",
    "relative_error",
    "solve_down",
    "teacher_ffn_statistics",
    "top_units",
]
