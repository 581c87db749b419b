"""Layer-wise healing (`hf-ffn heal --method layerwise`): fit each converted layer to reproduce its teacher layer,
one layer after another, before (optionally) the end-to-end distillation of `hf_ffn.healing.run`.

The cheap conversions of pretrained networks start this way: Kwon et al. 2022 (BERT FFN pruning + layer-wise
least-squares reconstruction), MOHAWK (Bick et al. 2024, stage 2: hidden-state alignment per block), LoLCATs
(Zhang et al. 2024, attention transfer), Minitron (Muralidharan et al. 2024). For layer i, with the teacher
(the source checkpoint loaded as a default FfnBert, bit-exact with BERT) run on the calibration blocks:

    ffn    (`--layerwise_parts ffn`, where teacher and student place the LayerNorm alike) the FFN alone, on the
           teacher's own FFN input x and output y (teacher forcing): down_proj in closed form (ridge least squares,
           `hf_ffn.conversion.pruning.solve_down`), then `layerwise_steps` Adam steps on gate/up/down (MSE; with
           `--layerwise_refit_every N` down_proj is also solved in closed form every N steps, variable projection),
           then down_proj solved again for the final gate/up (so down is optimal for the features it ends with);
           if the steps left a larger error than the first closed form, the closed form is kept ("ffn_kept").
    layer  (`--layerwise_parts layer`) the ffn fit where it applies, then Adam on the whole layer (attention,
           LayerNorms, FFN) so that layer(input) matches the teacher layer's output h_i (MSE over tokens; kept only
           if it lowers the error, "layer_kept"). For a
           Pre-LN student of a Post-LN teacher the residual stream x_i after layer i has no exact counterpart:
           `--layerwise_stream free` (the default) fits LN(x_i) to LN(h_i), LN a LayerNorm without affine part, so
           each token's scale and mean stay free and the stream grows from layer to layer as a Pre-LN network's does
           (measured: 16 → 191 in mean norm over MiniLM's 6 layers); `teacher` fits x_i to h_i itself, so every
           layer must cancel most of its input (the sublayers' outputs stay small). The last layer is fitted
           through `final_norm` (with it, to the teacher's last output); `final_norm` is then set in closed form
           (per coordinate, γ_d, β_d = least squares of h_L[:, d] on the normalised residual stream) so that the
           final norm gives what the teacher's last layer gave.

`--layerwise_inputs teacher` (parallel: each layer on the teacher's h_{i-1}) or `student` (sequential: on the
student's own h_{i-1}, so a layer corrects the error of those before it; the target stays the teacher's h_i). It
applies to the whole-layer fit; the FFN fit always uses the teacher FFN's own input and output.

Memory. The calibration tokens live in memory as at most `HELD_TENSORS` float32 tensors of (tokens, hidden)
(teacher and student hidden states, the teacher layer's output, FFN input and output, the student's output);
`--layerwise_memory_mb` caps their sum, and above it fewer blocks are used (the log and the record state the tokens
and bytes). The closed-form fit adds one (I+1)² float64 Gram matrix. bert-base (hidden 768) on 10⁵ tokens:
6 × 10⁵ × 768 × 4 B = 1.8 GB.

Resume. After each layer its weights (`layer-<i>.safetensors`) and record (`layer-<i>.json`) are written to
`work_dir`; a rerun loads finished layers instead of fitting them again (the inputs of the next layer are
recomputed from the loaded weights, so the result equals an uninterrupted run's), if it has the arguments recorded
in `work_dir/arguments.json` (else it is refused; `hf_ffn.healing.layerwise_folder`).

Progress. transformers' tqdm bars (`transformers.utils.logging.tqdm`, silenced by
`transformers.utils.logging.disable_progress_bar()`): one over the layers, with each layer's error before → after,
and one over each fit's Adam steps.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import PretrainedConfig
from transformers.utils.logging import tqdm  # transformers' progress bars (off with disable_progress_bar())

from ..configuration_ffn_bert import FfnBertConfig
from ..conversion.pruning import GramStatistics, accumulate, relative_error, solve_down
from ..modeling_ffn_bert import FfnBertModel
from .distill import dropout_off
from .layerwise_folder import calibration_digest, check_resume_arguments, load_layer, save_layer

logger = logging.getLogger(__name__)

LAYERWISE_PARTS = {
    "ffn": "each FFN on its teacher FFN's input/output",
    "layer": "the FFN fit, then the whole layer (attention, LayerNorms, FFN) to the teacher layer's output",
    "auto": "ffn if every layer places its LayerNorms as the teacher's, else layer",
}
LAYERWISE_INPUTS = ("teacher", "student", "auto")
LAYERWISE_STREAMS = {
    "free": "only the stream's LayerNorm-normalised form fitted: its per-token scale and mean free",
    "teacher": "the residual stream after each layer fitted to the teacher's hidden state",
}
HELD_TENSORS = 6  # (tokens, hidden) float32 tensors held at once; see the module docstring
METHODS = ("end_to_end", "layerwise")


@dataclass
class LayerwiseArguments:
    """The layer-wise stage of `hf-ffn heal --method layerwise` (parsed with `HealArguments`). The defaults are the
    best recipe measured on all-MiniLM-L6-v2 (docs/healing.md): 65,536 calibration tokens, 1000 Adam steps of 512
    tokens per fit, and parts/inputs `auto`: FFN fits on the teacher's own FFN inputs where the student places its
    LayerNorms as the teacher does (the SwiGLU students), whole layers on the student's own inputs where it does
    not (a Pre-LN student of a Post-LN teacher). A nearly exact start (the approximate SwiGLU) needs only the
    closed form, `--layerwise_steps 0` (with steps, the closed form is kept where they do not help)."""

    layerwise_tokens: int = field(
        default=65536, metadata={"help": "calibration tokens (whole blocks, evenly spaced over the training text)"}
    )
    layerwise_memory_mb: float = field(
        default=2048.0,
        metadata={"help": "cap on the recorded activations (MB, 10⁶ bytes); above it fewer tokens are used"},
    )
    layerwise_steps: int = field(
        default=1000,
        metadata={"help": "Adam steps per layer (each fit; 0: closed form only, as good for a nearly exact start)"},
    )
    layerwise_lr: float = field(default=1e-3, metadata={"help": "peak Adam learning rate (cosine decay to 0)"})
    layerwise_batch_tokens: int = field(default=512, metadata={"help": "tokens per Adam step"})
    layerwise_parts: str = field(
        default="auto",
        metadata={
            "help": "ffn, layer (see hf_ffn.healing.layerwise) or "
            "auto: ffn where the LayerNorms sit as the "
            "teacher's, else layer"
        },
    )
    layerwise_inputs: str = field(
        default="auto",
        metadata={
            "help": "teacher (parallel) or student (sequential) layer inputs; auto: teacher for ffn, student for layer"
        },
    )
    layerwise_refit_every: int = field(
        default=0,
        metadata={
            "help": "also solve down_proj in closed form every N Adam steps of the FFN fit (0: before and after)"
        },
    )
    layerwise_ridge: float = field(
        default=1e-4, metadata={"help": "ridge of the closed-form down projection, relative to the mean feature energy"}
    )
    layerwise_stream: str = field(
        default="free",
        metadata={
            "help": "a Pre-LN student's residual stream after "
            "each layer: free (only its LayerNorm-normalised "
            "form is fitted to the teacher's hidden state) or "
            "teacher (the stream itself)"
        },
    )

    def __post_init__(self) -> None:
        if self.layerwise_parts not in LAYERWISE_PARTS:
            raise ValueError(
                f"--layerwise_parts has unknown value {self.layerwise_parts!r}; allowed: {', '.join(LAYERWISE_PARTS)}"
            )
        if self.layerwise_inputs not in LAYERWISE_INPUTS:
            raise ValueError(
                f"--layerwise_inputs has unknown value {self.layerwise_inputs!r}; allowed: "
                f"{', '.join(LAYERWISE_INPUTS)}"
            )
        for name in ("layerwise_tokens", "layerwise_batch_tokens", "layerwise_memory_mb"):
            if getattr(self, name) <= 0:
                raise ValueError(f"--{name} must be > 0, got {getattr(self, name)}")
        if self.layerwise_parts == "ffn" and self.layerwise_inputs == "student":  # "auto" is resolved per model
            raise ValueError(
                "--layerwise_inputs student applies to the whole-layer fit: the FFN fit is always on the "
                "teacher FFN's input/output; use --layerwise_parts layer (or --layerwise_inputs teacher)"
            )
        if self.layerwise_stream not in LAYERWISE_STREAMS:
            raise ValueError(
                f"--layerwise_stream has unknown value {self.layerwise_stream!r}; allowed: "
                f"{', '.join(LAYERWISE_STREAMS)}"
            )
        if self.layerwise_refit_every < 0:
            raise ValueError(f"--layerwise_refit_every must be >= 0, got {self.layerwise_refit_every}")
        if self.layerwise_steps < 0 or self.layerwise_lr <= 0 or self.layerwise_ridge < 0:
            raise ValueError(
                f"--layerwise_steps must be >= 0 (got {self.layerwise_steps}), --layerwise_lr > 0 (got "
                f"{self.layerwise_lr}), --layerwise_ridge >= 0 (got {self.layerwise_ridge})"
            )


# Fewer calibration tokens than this many per FFN unit and a fit can match the calibration text better while
# matching new text worse (seen: 4,096 tokens for 1,024 units lowered held-out cosine 0.872 → 0.860).
MIN_TOKENS_PER_UNIT = 8


def check_calibration_tokens(tokens: int, intermediate_size: int) -> None:
    """Refuse an underdetermined fit, warn about an under-sampled one.

    The closed-form down projection solves for `intermediate_size` + 1 coefficients per output from `tokens`
    equations: with `tokens` <= `intermediate_size` + 1 it interpolates the calibration text exactly (relative error
    0) and generalises badly. Raises `ValueError` naming `--layerwise_tokens` then; logs a warning below
    `MIN_TOKENS_PER_UNIT` tokens per unit.
    """
    if tokens <= intermediate_size + 1:
        raise ValueError(
            f"--layerwise_tokens: {tokens} calibration tokens cannot determine a down projection of "
            f"{intermediate_size} units (needs more than {intermediate_size + 1}; at least "
            f"{MIN_TOKENS_PER_UNIT * intermediate_size} recommended): give more text or tokens"
        )
    if tokens < MIN_TOKENS_PER_UNIT * intermediate_size:
        logger.warning(
            "layer-wise healing on %d calibration tokens for %d FFN units (< %d per unit): the fit may "
            "match the calibration text and lose agreement on other text; use --layerwise_tokens >= %d",
            tokens,
            intermediate_size,
            MIN_TOKENS_PER_UNIT,
            MIN_TOKENS_PER_UNIT * intermediate_size,
        )


def calibration_blocks(input_ids: torch.Tensor, args: LayerwiseArguments, hidden_size: int) -> torch.Tensor:
    """Blocks of `input_ids` (blocks, seq), evenly spaced over all of them (the text's documents in order), within
    `layerwise_tokens` and the memory cap (`HELD_TENSORS` × tokens × hidden × 4 bytes ≤ `layerwise_memory_mb` · 10⁶);
    at least one block.

    Raises:
        ValueError: if not even one block fits under the cap.
    """
    seq = input_ids.shape[1]
    per_block = HELD_TENSORS * seq * hidden_size * 4
    by_memory = int(args.layerwise_memory_mb * 1e6 // per_block)
    if by_memory < 1:
        raise ValueError(
            f"--layerwise_memory_mb {args.layerwise_memory_mb}: one block of {seq} tokens needs "
            f"{per_block / 1e6:.3f} MB of activations; raise the cap"
        )
    count = max(1, min(len(input_ids), args.layerwise_tokens // seq, by_memory))
    return input_ids[torch.linspace(0, len(input_ids) - 1, count).round().long()]


class NormedLayer(nn.Module):
    """A layer followed by a LayerNorm (a Pre-LN encoder's last layer and its `final_norm`), fitted as one."""

    def __init__(self, layer: nn.Module, norm: nn.LayerNorm):
        super().__init__()
        self.layer, self.norm = layer, norm

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.norm(self.layer(hidden_states))


@torch.no_grad()
def relative_squared_error(prediction: torch.Tensor, target: torch.Tensor) -> float:
    """‖prediction − target‖² / ‖target‖² over all elements (float64 sums)."""
    return float((prediction.detach().double() - target.double()).pow(2).sum() / target.double().pow(2).sum())


@torch.no_grad()
def run_layer(layer: nn.Module, hidden: torch.Tensor, chunk: int = 16, mlp_io: bool = False):
    """`layer` over (blocks, seq, hidden) in chunks of blocks (no mask: calibration blocks are full). With `mlp_io`,
    also the FFN's input and output (tokens, hidden), recorded by a forward hook. Returns out or (out, x, y)."""
    outs, xs, ys = [], [], []

    def record(module, args, output) -> None:
        xs.append(args[0].reshape(-1, args[0].shape[-1]))
        ys.append(output.reshape(-1, output.shape[-1]))

    handle = layer.mlp.register_forward_hook(record) if mlp_io else None
    try:
        for start in range(0, len(hidden), chunk):
            outs.append(layer(hidden[start : start + chunk]))
    finally:
        if handle is not None:
            handle.remove()
    out = torch.cat(outs)
    return (out, torch.cat(xs), torch.cat(ys)) if mlp_io else out


@torch.no_grad()
def apply_chunked(module: nn.Module, x: torch.Tensor, chunk: int = 4096) -> torch.Tensor:
    """`module` over the rows of `x` (tokens, hidden) in chunks (its intermediate activations stay small)."""
    return torch.cat([module(part) for part in x.split(chunk)])


def adam_fit(
    parameters: list[nn.Parameter],
    loss_of,
    count: int,
    batch: int,
    steps: int,
    lr: float,
    seed: int,
    every: int = 0,
    callback=None,
    desc: str = "Adam steps",
) -> list[float]:
    """`steps` Adam steps (cosine decay from `lr` to 0) on `loss_of(index)` for random minibatches of `batch` of
    `count` rows (a generator seeded with `seed`); `callback()` after every `every` steps (0: never). Shows a
    progress bar named `desc` (removed when done). Returns the losses every step."""
    if steps == 0:
        return []
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(parameters, lr=lr)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 0.5 * (1 + math.cos(math.pi * s / steps)))
    losses = []
    for _ in tqdm(range(steps), desc=desc, unit="step", leave=False):
        index = torch.randint(count, (min(batch, count),), generator=generator)
        loss = loss_of(index)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
        if every and callback is not None and len(losses) % every == 0 and len(losses) < steps:
            callback()
    return losses


def set_down(mlp: nn.Module, stats: GramStatistics, ridge: float) -> float:
    """Set `mlp.down_proj` to the ridge least-squares solution; returns the relative squared error it reaches."""
    weight, bias = solve_down(stats, None, ridge)
    with torch.no_grad():
        mlp.down_proj.weight.copy_(weight)
        if mlp.down_proj.bias is not None:
            mlp.down_proj.bias.copy_(bias)
    return relative_error(stats, weight, bias if mlp.down_proj.bias is not None else torch.zeros_like(bias))


def fit_ffn(mlp: nn.Module, x: torch.Tensor, y: torch.Tensor, args: LayerwiseArguments, seed: int) -> dict:
    """Closed-form down, Adam on the FFN, closed-form down again (module docstring). x, y (tokens, hidden)."""
    before = relative_squared_error(apply_chunked(mlp, x), y)
    closed = set_down(mlp, accumulate(mlp, x, y), args.layerwise_ridge)
    closed_state = {k: v.clone() for k, v in mlp.state_dict().items()}
    losses = adam_fit(
        list(mlp.parameters()),
        lambda i: (mlp(x[i]) - y[i]).pow(2).mean(),
        len(x),
        args.layerwise_batch_tokens,
        args.layerwise_steps,
        args.layerwise_lr,
        seed,
        args.layerwise_refit_every,
        lambda: set_down(mlp, accumulate(mlp, x, y), args.layerwise_ridge),
        desc="FFN fit",
    )
    after = set_down(mlp, accumulate(mlp, x, y), args.layerwise_ridge) if losses else closed
    kept = "adam"
    if after > closed:  # the steps made the fit worse (too high a rate for a near-exact start): keep the closed form
        mlp.load_state_dict(closed_state)
        after, kept = closed, "closed_form"
    return {
        "ffn_rel_error_before": before,
        "ffn_rel_error_closed_form": closed,
        "ffn_rel_error": after,
        "ffn_kept": kept,
        "ffn_adam_loss_first_last": losses[:1] + losses[-1:],
    }


def normalized(x: torch.Tensor) -> torch.Tensor:
    """LayerNorm without its affine part over the last dimension (eps 1e-12, BERT's): each token's vector with
    mean 0 and variance 1. `--layerwise_stream free` compares a Pre-LN residual stream with the teacher's hidden
    state in this form, so the stream's per-token scale and mean are not fitted."""
    return nn.functional.layer_norm(x, x.shape[-1:], eps=1e-12)


def unchanged(hidden: torch.Tensor) -> torch.Tensor:
    """The view that leaves a hidden state as it is (`fit_whole_layer`'s default; a function, not a shared module)."""
    return hidden


def fit_whole_layer(
    layer: nn.Module,
    inputs: torch.Tensor,
    target: torch.Tensor,
    args: LayerwiseArguments,
    seed: int,
    view: Callable[[torch.Tensor], torch.Tensor] = unchanged,
) -> dict:
    """Adam on every parameter of `layer` so that view(layer(inputs)) ≈ target; (blocks, seq, hidden) each (`view`:
    the identity, or `normalized` with a normalised target). Kept only if it lowers the relative squared error on
    the calibration tokens (else the layer is restored)."""
    blocks = max(1, args.layerwise_batch_tokens // inputs.shape[1])
    start_error = relative_squared_error(view(run_layer(layer, inputs)), target)
    start_state = {k: v.clone() for k, v in layer.state_dict().items()}
    losses = adam_fit(
        list(layer.parameters()),
        lambda i: (view(layer(inputs[i])) - target[i]).pow(2).mean(),
        len(inputs),
        blocks,
        args.layerwise_steps,
        args.layerwise_lr,
        seed,
        desc="layer fit",
    )
    kept = "adam"
    if losses and relative_squared_error(view(run_layer(layer, inputs)), target) > start_error:
        layer.load_state_dict(start_state)
        kept = "start"
    return {"layer_kept": kept, "layer_adam_loss_first_last": losses[:1] + losses[-1:]}


@torch.no_grad()
def fit_final_norm(norm: nn.LayerNorm, stream: torch.Tensor, target: torch.Tensor) -> dict:
    """γ, β of `norm` by least squares per coordinate: target[:, d] ≈ γ_d n_d + β_d, n = the normalised `stream`
    (tokens, hidden) (LayerNorm without its affine part). Returns the relative squared error before/after."""
    before = relative_squared_error(norm(stream), target)
    n = nn.functional.layer_norm(stream.double(), stream.shape[-1:], eps=norm.eps)
    t = target.double()
    n_mean, t_mean = n.mean(0), t.mean(0)
    gamma = ((n - n_mean) * (t - t_mean)).sum(0) / (n - n_mean).pow(2).sum(0).clamp(min=1e-12)
    norm.weight.copy_(gamma)
    norm.bias.copy_(t_mean - gamma * n_mean)
    return {"final_norm_rel_error_before": before, "final_norm_rel_error": relative_squared_error(norm(stream), target)}


def resolve_auto(args: LayerwiseArguments, same_norms: bool) -> LayerwiseArguments:
    """`args` with `auto` parts/inputs replaced by the measured best (docs/healing.md): FFN fits on the teacher's
    inputs where every layer places its LayerNorms as the teacher's (`same_norms`), else whole layers on the
    student's own inputs (inputs `auto` follow the parts: teacher for ffn, student for layer)."""
    parts = args.layerwise_parts if args.layerwise_parts != "auto" else ("ffn" if same_norms else "layer")
    inputs = args.layerwise_inputs if args.layerwise_inputs != "auto" else ("teacher" if parts == "ffn" else "student")
    return replace(args, layerwise_parts=parts, layerwise_inputs=inputs)


def prepare_layerwise(
    s_config: FfnBertConfig,
    t_config: PretrainedConfig,
    input_ids: torch.Tensor,
    args: LayerwiseArguments,
    work_dir: str | Path,
    seed: int = 0,
) -> tuple[LayerwiseArguments, torch.Tensor, list[bool]]:
    """Everything `heal_layerwise` checks and records before fitting, from the configs alone (so a command can refuse
    before it loads or measures a model). `input_ids`: (blocks, seq) int64 token ids of the calibration text.

    Returns:
        (`args` with `auto` resolved, the calibration blocks actually used (blocks', seq) int64 (`calibration_blocks`),
        one bool per layer: whether student and teacher place its LayerNorms alike). Writes `work_dir`/arguments.json
        when the folder holds no finished layer (`check_resume_arguments`).

    Raises:
        ValueError: depths or hidden sizes differ; `--layerwise_parts ffn` for a layer whose LayerNorm placement
            differs from the teacher's (its FFN input is another quantity: use `layer`); too few calibration tokens;
            `work_dir` holds layers fitted with other arguments.
    """
    if s_config.num_hidden_layers != t_config.num_hidden_layers or s_config.hidden_size != t_config.hidden_size:
        raise ValueError(
            f"layer-wise healing pairs layers: student has {s_config.num_hidden_layers} layers of "
            f"{s_config.hidden_size}, teacher {t_config.num_hidden_layers} of {t_config.hidden_size}"
        )
    t_norms = getattr(t_config, "layer_norm_positions", ["post"] * t_config.num_hidden_layers)  # a BertConfig: Post-LN
    same_norms = [s == t for s, t in zip(s_config.layer_norm_positions, t_norms, strict=False)]
    args = resolve_auto(args, all(same_norms))
    if args.layerwise_parts == "ffn" and not all(same_norms):
        raise ValueError(
            f"--layerwise_parts ffn fits each FFN to its teacher FFN, but the LayerNorm placement "
            f"differs ({s_config.layer_norm_positions} vs the teacher's {t_norms}); "
            f"use --layerwise_parts layer"
        )
    input_ids = calibration_blocks(input_ids, args, s_config.hidden_size)
    check_calibration_tokens(input_ids.numel(), s_config.intermediate_size)
    check_resume_arguments(
        Path(work_dir), {**asdict(args), "seed": seed, "calibration_sha256": calibration_digest(input_ids)}
    )
    return args, input_ids, same_norms


def heal_layerwise(
    student: FfnBertModel,
    teacher: FfnBertModel,
    input_ids: torch.Tensor,
    args: LayerwiseArguments,
    work_dir: str | Path,
    seed: int = 0,
) -> dict[str, Any]:
    """Fit `student` (an FfnBert base model, changed in place) layer by layer to `teacher` (an FfnBert base model of
    the same depth and hidden size) on the calibration blocks `input_ids` (blocks, seq) (module docstring).

    Returns:
        {"arguments", "tokens", "blocks", "activation_bytes" (the recorded tensors' real size), "layers": one
        record per layer (errors before/after, "propagated_rel_error": the student's own h_i against the
        teacher's after fitting), "final_norm" (Pre-LN), "seconds"}.

    Raises:
        ValueError: as `prepare_layerwise`.
    """
    s_config = student.config
    start = time.perf_counter()
    work_dir = Path(work_dir)
    args, input_ids, same_norms = prepare_layerwise(s_config, teacher.config, input_ids, args, work_dir, seed)
    tokens = input_ids.numel()
    logger.info(
        "layer-wise healing on %d blocks × %d tokens (cap %.0f MB)",
        len(input_ids),
        input_ids.shape[1],
        args.layerwise_memory_mb,
    )
    student.eval(), teacher.eval()
    records: list[dict] = []
    held_bytes = 0
    with dropout_off(student), torch.no_grad():
        t_hidden = torch.cat([teacher.embeddings(input_ids=ids) for ids in input_ids.split(16)])
        s_hidden = torch.cat([student.embeddings(input_ids=ids) for ids in input_ids.split(16)])
    progress = tqdm(total=len(student.encoder.layer), desc="layer-wise healing", unit="layer")
    for i, (s_layer, t_layer) in enumerate(zip(student.encoder.layer, teacher.encoder.layer, strict=False)):
        t_out, x, y = run_layer(t_layer, t_hidden, mlp_io=True)
        inputs = t_hidden if args.layerwise_inputs == "teacher" else s_hidden
        held_bytes = max(held_bytes, sum(t.numel() * t.element_size() for t in (t_hidden, s_hidden, t_out, x, y)))
        # A Pre-LN student's last layer is fitted through its final_norm to the teacher's last (normalised) output.
        normed = (
            i == len(student.encoder.layer) - 1
            and student.encoder.final_norm is not None
            and teacher.encoder.final_norm is None
        )
        fitted = NormedLayer(s_layer, student.encoder.final_norm) if normed else s_layer
        # --layerwise_stream free: a Pre-LN stream is compared with the teacher's hidden state once both are normalised
        free = args.layerwise_stream == "free" and not same_norms[i] and not normed
        view = normalized if free else unchanged
        target = view(t_out)
        record = load_layer(work_dir, f"layer-{i}", fitted)
        if record is not None and record.get("free_stream", False) != free:  # a folder from before arguments.json
            raise ValueError(
                f"{work_dir}: layer {i} was fitted with --layerwise_stream "
                f"{'free' if record.get('free_stream') else 'teacher'}, this run asks for "
                f"{args.layerwise_stream}; use another --output_dir, or that --layerwise_stream to resume"
            )
        if record is None:
            layer_start = time.perf_counter()
            with dropout_off(student):
                record = {
                    "layer": i,
                    "through_final_norm": normed,
                    "free_stream": free,
                    "layer_rel_error_before": relative_squared_error(view(run_layer(fitted, inputs)), target),
                }
                if same_norms[i]:  # teacher forcing: the teacher FFN's own input and output
                    record.update(fit_ffn(s_layer.mlp, x, y, args, seed + i))
                if args.layerwise_parts == "layer":
                    record.update(fit_whole_layer(fitted, inputs, target, args, seed + 1000 + i, view))
                record["layer_rel_error"] = relative_squared_error(view(run_layer(fitted, inputs)), target)
            record["seconds"] = time.perf_counter() - layer_start
            save_layer(work_dir, f"layer-{i}", fitted, record)
        del x, y
        with dropout_off(student):
            s_hidden = run_layer(s_layer, s_hidden)
            record["propagated_rel_error"] = relative_squared_error(
                fitted.norm(s_hidden) if normed else view(s_hidden), target
            )
            record["stream_norm"] = float(s_hidden.norm(dim=-1).mean())  # mean per-token norm of the residual stream
        logger.info("layer %d: %s", i, {k: round(v, 6) for k, v in record.items() if isinstance(v, float)})
        records.append(record)
        progress.set_postfix(
            layer=i,
            rel_error=f"{record.get('layer_rel_error_before', math.nan):.3g}→"
            f"{record.get('layer_rel_error', math.nan):.3g}",
        )
        progress.update()
        t_hidden = t_out
    progress.close()
    result: dict[str, Any] = {
        "arguments": asdict(args),
        "blocks": len(input_ids),
        "tokens": tokens,
        "activation_bytes": held_bytes,
        "layers": records,
    }
    norm = student.encoder.final_norm
    if norm is not None:
        t_last = t_hidden if teacher.encoder.final_norm is None else teacher.encoder.final_norm(t_hidden)
        final = load_layer(work_dir, "final_norm", norm)
        if final is None:
            final = fit_final_norm(norm, s_hidden.reshape(-1, s_hidden.shape[-1]), t_last.reshape(-1, t_last.shape[-1]))
            save_layer(work_dir, "final_norm", norm, final)
        result["final_norm"] = final
    result["seconds"] = time.perf_counter() - start
    return result


__all__ = [
    "HELD_TENSORS",
    "LAYERWISE_INPUTS",
    "LAYERWISE_PARTS",
    "LAYERWISE_STREAMS",
    "METHODS",
    "LayerwiseArguments",
    "NormedLayer",
    "adam_fit",
    "apply_chunked",
    "calibration_blocks",
    "fit_ffn",
    "fit_final_norm",
    "fit_whole_layer",
    "heal_layerwise",
    "normalized",
    "prepare_layerwise",
    "relative_squared_error",
    "resolve_auto",
    "run_layer",
    "set_down",
]
