"""Layer-wise healing (`hf-ffn heal --method layerwise`; docs/healing.md, "Methods"): each converted layer fitted to
its teacher layer, one after another, on calibration blocks (Kwon et al. 2022; MOHAWK, Bick et al. 2024; Minitron,
Muralidharan et al. 2024): `fit_ffn` (closed-form down projection, Adam, closed form again), `fit_whole_layer`,
`fit_final_norm`. At most `HELD_TENSORS` float32 (tokens, hidden) tensors are held. Each finished fit is saved in
`work_dir` with its arguments (`arguments.json`): a rerun with the same ones resumes, one with others is refused.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import PretrainedConfig
from transformers.utils.logging import tqdm  # transformers' progress bars (off with disable_progress_bar())

from ..configuration_ffn_bert import FfnBertConfig
from ..conversion.pruning import GramStatistics, accumulate, relative_error, solve_down
from ..files import atomic_output_file
from ..modeling_ffn_bert import FfnBertPreTrainedModel
from ..training.arguments import option

logger = logging.getLogger(__name__)

LAYERWISE_PARTS = ("ffn", "layer", "auto")
LAYERWISE_INPUTS = ("teacher", "student", "auto")
LAYERWISE_STREAMS = ("free", "teacher")
HELD_TENSORS = 6  # (tokens, hidden) float32 tensors held at once: hidden states, layer output, FFN input/output
METHODS = ("end_to_end", "layerwise")


@dataclass
class LayerwiseArguments:
    """The layer-wise stage of `hf-ffn heal --method layerwise`; the defaults are the best recipe measured on
    all-MiniLM-L6-v2 (docs/healing.md)."""

    layerwise_tokens: int = option(65536, "calibration tokens (whole blocks, evenly spaced over the training text)")
    layerwise_memory_mb: float = option(
        2048.0, "cap on the recorded activations (MB, 10⁶ bytes); above it fewer tokens are used"
    )
    layerwise_steps: int = option(
        1000, "Adam steps per layer (each fit; 0: closed form only, as good for a nearly exact start)"
    )
    layerwise_lr: float = option(1e-3, "peak Adam learning rate (cosine decay to 0)")
    layerwise_batch_tokens: int = option(512, "tokens per Adam step")
    layerwise_parts: str = option(
        "auto",
        "ffn, layer (see hf_ffn.healing.layerwise) or auto: ffn where the LayerNorms sit as the teacher's, else layer",
    )
    layerwise_inputs: str = option(
        "auto", "teacher (parallel) or student (sequential) layer inputs; auto: teacher for ffn, student for layer"
    )
    layerwise_refit_every: int = option(
        0, "also solve down_proj in closed form every N Adam steps of the FFN fit (0: before and after)"
    )
    layerwise_ridge: float = option(
        1e-4, "ridge of the closed-form down projection, relative to the mean feature energy"
    )
    layerwise_stream: str = option(
        "free",
        "a Pre-LN student's residual stream after each layer: free (only its LayerNorm-normalised "
        "form is fitted to the teacher's hidden state) or teacher (the stream itself)",
    )

    def __post_init__(self) -> None:
        for name, allowed in (
            ("layerwise_parts", LAYERWISE_PARTS),
            ("layerwise_inputs", LAYERWISE_INPUTS),
            ("layerwise_stream", LAYERWISE_STREAMS),
        ):
            if getattr(self, name) not in allowed:
                raise ValueError(f"--{name} has unknown value {getattr(self, name)!r}; allowed: {', '.join(allowed)}")
        for name in ("layerwise_tokens", "layerwise_batch_tokens", "layerwise_memory_mb"):
            if getattr(self, name) <= 0:
                raise ValueError(f"--{name} must be > 0, got {getattr(self, name)}")
        if self.layerwise_parts == "ffn" and self.layerwise_inputs == "student":  # "auto" is resolved per model
            raise ValueError(
                "--layerwise_inputs student applies to the whole-layer fit: the FFN fit is always on the "
                "teacher FFN's input/output; use --layerwise_parts layer (or --layerwise_inputs teacher)"
            )
        if self.layerwise_refit_every < 0:
            raise ValueError(f"--layerwise_refit_every must be >= 0, got {self.layerwise_refit_every}")
        if self.layerwise_steps < 0 or self.layerwise_lr <= 0 or self.layerwise_ridge < 0:
            raise ValueError(
                f"--layerwise_steps must be >= 0 (got {self.layerwise_steps}), --layerwise_lr > 0 (got "
                f"{self.layerwise_lr}), --layerwise_ridge >= 0 (got {self.layerwise_ridge})"
            )


def prepare_layerwise(
    s_config: FfnBertConfig,
    t_config: PretrainedConfig,
    input_ids: torch.Tensor,
    args: LayerwiseArguments,
    work_dir: str | Path,
    seed: int = 0,
) -> tuple[LayerwiseArguments, torch.Tensor, list[bool]]:
    """The checks of `heal_layerwise` from the configs alone (a command refuses before loading a model); writes
    `work_dir`/arguments.json. `input_ids`: (blocks, seq).

    Returns:
        (`args` with `auto` resolved, the calibration blocks used, one bool per layer: LayerNorms placed alike).

    Raises:
        ValueError: depths or hidden sizes differ; `--layerwise_parts ffn` across LayerNorm placements; a block over
            the memory cap; too few calibration tokens; `work_dir` holds fits made with other arguments.
    """
    if s_config.num_hidden_layers != t_config.num_hidden_layers or s_config.hidden_size != t_config.hidden_size:
        raise ValueError(
            f"layer-wise healing pairs layers: student has {s_config.num_hidden_layers} layers of "
            f"{s_config.hidden_size}, teacher {t_config.num_hidden_layers} of {t_config.hidden_size}"
        )
    t_norms = getattr(t_config, "layer_norm_positions", ["post"] * t_config.num_hidden_layers)  # a BertConfig: Post-LN
    same_norms = [s == t for s, t in zip(s_config.layer_norm_positions, t_norms, strict=False)]
    # auto: parts ffn if the LayerNorms sit alike, else layer; inputs teacher for ffn, student for layer
    parts = args.layerwise_parts if args.layerwise_parts != "auto" else ("ffn" if all(same_norms) else "layer")
    inputs = args.layerwise_inputs if args.layerwise_inputs != "auto" else ("teacher" if parts == "ffn" else "student")
    args = replace(args, layerwise_parts=parts, layerwise_inputs=inputs)
    if args.layerwise_parts == "ffn" and not all(same_norms):
        raise ValueError(
            f"--layerwise_parts ffn fits each FFN to its teacher FFN, but the LayerNorm placement "
            f"differs ({s_config.layer_norm_positions} vs the teacher's {t_norms}); "
            f"use --layerwise_parts layer"
        )
    # evenly spaced blocks within layerwise_tokens and the memory cap: HELD_TENSORS × tokens × hidden × 4 bytes
    seq = input_ids.shape[1]
    per_block = HELD_TENSORS * seq * s_config.hidden_size * 4
    by_memory = int(args.layerwise_memory_mb * 1e6 // per_block)
    if by_memory < 1:
        raise ValueError(
            f"--layerwise_memory_mb {args.layerwise_memory_mb}: one block of {seq} tokens needs "
            f"{per_block / 1e6:.3f} MB of activations; raise the cap"
        )
    count = max(1, min(len(input_ids), args.layerwise_tokens // seq, by_memory))
    input_ids = input_ids[torch.linspace(0, len(input_ids) - 1, count).round().long()]
    check_calibration_tokens(input_ids.numel(), s_config.intermediate_size)
    check_resume_arguments(
        Path(work_dir), {**asdict(args), "seed": seed, "calibration_sha256": calibration_digest(input_ids)}
    )
    return args, input_ids, same_norms


def heal_layerwise(
    student: FfnBertPreTrainedModel,
    teacher: FfnBertPreTrainedModel,
    input_ids: torch.Tensor,
    args: LayerwiseArguments,
    work_dir: str | Path,
    seed: int = 0,
    prepared: tuple[LayerwiseArguments, torch.Tensor, list[bool]] | None = None,
) -> dict[str, Any]:
    """Fit `student` (an hf_ffn base model, in place) layer by layer to `teacher` (one of the same family, depth and
    hidden size) on the calibration blocks `input_ids` (blocks, seq), from `encoder_input`. `prepared`: what
    `prepare_layerwise` returned for these arguments, if a caller checked them already.

    Returns:
        {"arguments", "blocks", "tokens", "activation_bytes", "layers": one record per layer (errors before/after,
        "propagated_rel_error": the student's own h_i against the teacher's), "final_norm" (Pre-LN), "seconds"}.

    Raises:
        ValueError: as `prepare_layerwise`.
    """
    start = time.perf_counter()
    work_dir = Path(work_dir)
    prepared = prepared or prepare_layerwise(student.config, teacher.config, input_ids, args, work_dir, seed)
    args, input_ids, same_norms = prepared
    logger.info("layer-wise healing on %d blocks × %d tokens (cap %.0f MB)", *input_ids.shape, args.layerwise_memory_mb)
    student.eval(), teacher.eval()  # dropout off: the target is the teacher's inference function
    records: list[dict] = []
    held_bytes = 0
    with torch.no_grad():
        t_hidden = torch.cat([encoder_input(teacher, ids) for ids in input_ids.split(16)])
        s_hidden = torch.cat([encoder_input(student, ids) for ids in input_ids.split(16)])
    layers = student.encoder.layer
    progress = tqdm(total=len(layers), desc="layer-wise healing", unit="layer")
    for i, (s_layer, t_layer) in enumerate(zip(layers, teacher.encoder.layer, strict=False)):
        t_out, x, y = run_layer(t_layer, t_hidden, mlp_io=True)
        inputs = t_hidden if args.layerwise_inputs == "teacher" else s_hidden
        held_bytes = max(held_bytes, sum(t.numel() * t.element_size() for t in (t_hidden, s_hidden, t_out, x, y)))
        # A Pre-LN student's last layer is fitted through its final_norm to the teacher's last (normalised) output.
        normed = i == len(layers) - 1 and student.encoder.final_norm is not None and teacher.encoder.final_norm is None
        fitted = NormedLayer(s_layer, student.encoder.final_norm) if normed else s_layer
        free = args.layerwise_stream == "free" and not same_norms[i] and not normed
        view = normalized if free else nn.Identity()
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
        s_hidden = run_layer(s_layer, s_hidden)
        record["propagated_rel_error"] = relative_squared_error(
            fitted.norm(s_hidden) if normed else view(s_hidden), target
        )
        record["stream_norm"] = float(s_hidden.norm(dim=-1).mean())  # mean per-token norm of the residual stream
        logger.info("layer %d: %s", i, {k: round(v, 6) for k, v in record.items() if isinstance(v, float)})
        records.append(record)
        before, after = record.get("layer_rel_error_before", math.nan), record.get("layer_rel_error", math.nan)
        progress.set_postfix(layer=i, rel_error=f"{before:.3g}→{after:.3g}")
        progress.update()
        t_hidden = t_out
    progress.close()
    result: dict[str, Any] = {
        "arguments": asdict(args),
        "blocks": len(input_ids),
        "tokens": input_ids.numel(),
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


def fit_ffn(mlp: nn.Module, x: torch.Tensor, y: torch.Tensor, args: LayerwiseArguments, seed: int) -> dict:
    """Closed-form down, Adam on the FFN, closed-form down again (module docstring). x, y (tokens, hidden)."""

    def refit() -> float:
        return set_down(mlp, accumulate(mlp, x, y), args.layerwise_ridge)

    with torch.no_grad():
        before = relative_squared_error(torch.cat([mlp(part) for part in x.split(4096)]), y)
    closed = refit()
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
        refit,
        desc="FFN fit",
    )
    after = refit() if losses else closed
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


def fit_whole_layer(
    layer: nn.Module, inputs: torch.Tensor, target: torch.Tensor, args: LayerwiseArguments, seed: int, view: nn.Module
) -> dict:
    """Adam on every parameter of `layer` so that view(layer(inputs)) ≈ target, (blocks, seq, hidden) each; the
    layer is restored if that does not lower the relative squared error."""
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
    (tokens, hidden). Returns the relative squared error before/after."""
    before = relative_squared_error(norm(stream), target)
    n = nn.functional.layer_norm(stream.double(), stream.shape[-1:], eps=norm.eps)
    t = target.double()
    n_mean, t_mean = n.mean(0), t.mean(0)
    gamma = ((n - n_mean) * (t - t_mean)).sum(0) / (n - n_mean).pow(2).sum(0).clamp(min=1e-12)
    norm.weight.copy_(gamma)
    norm.bias.copy_(t_mean - gamma * n_mean)
    return {"final_norm_rel_error_before": before, "final_norm_rel_error": relative_squared_error(norm(stream), target)}


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
    """`steps` Adam steps (cosine decay from `lr` to 0) on `loss_of(index)` for seeded random minibatches of `batch`
    of `count` rows; `callback()` every `every` steps (0: never). Returns the loss of every step."""
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
    """Set `mlp.down_proj` to the ridge least-squares solution; returns its relative squared error."""
    weight, bias = solve_down(stats, None, ridge)
    with torch.no_grad():
        mlp.down_proj.weight.copy_(weight)
        if mlp.down_proj.bias is not None:
            mlp.down_proj.bias.copy_(bias)
    return relative_error(stats, weight, bias if mlp.down_proj.bias is not None else torch.zeros_like(bias))


def normalized(x: torch.Tensor) -> torch.Tensor:
    """LayerNorm without its affine part over the last dimension (eps 1e-12, BERT's): `--layerwise_stream free`."""
    return nn.functional.layer_norm(x, x.shape[-1:], eps=1e-12)


class NormedLayer(nn.Module):
    """A layer followed by a LayerNorm (a Pre-LN encoder's last layer and its `final_norm`), fitted as one."""

    def __init__(self, layer: nn.Module, norm: nn.LayerNorm):
        super().__init__()
        self.layer, self.norm = layer, norm

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.norm(self.layer(hidden_states))


@torch.no_grad()
def run_layer(layer: nn.Module, hidden: torch.Tensor, chunk: int = 16, mlp_io: bool = False):
    """`layer` over (blocks, seq, hidden) in chunks (no mask: calibration blocks are full); with `mlp_io` also the
    FFN's input and output (tokens, hidden): (out, x, y)."""
    xs, ys = [], []

    def record(module, args, output) -> None:
        xs.append(args[0].reshape(-1, args[0].shape[-1]))
        ys.append(output.reshape(-1, output.shape[-1]))

    handle = layer.mlp.register_forward_hook(record) if mlp_io else None
    try:
        out = torch.cat([layer(part) for part in hidden.split(chunk)])
    finally:
        if handle is not None:
            handle.remove()
    return (out, torch.cat(xs), torch.cat(ys)) if mlp_io else out


def encoder_input(model: nn.Module, input_ids: torch.Tensor) -> torch.Tensor:
    """What `model`'s encoder reads for `input_ids` (blocks, seq): its embeddings, projected in an ELECTRA whose
    `embedding_size` differs from `hidden_size`; (blocks, seq, hidden)."""
    hidden = model.embeddings(input_ids=input_ids)
    projection = getattr(model, "embeddings_project", None)  # ELECTRA's: (.., embedding_size) → (.., hidden_size)
    return hidden if projection is None else projection(hidden)


@torch.no_grad()
def relative_squared_error(prediction: torch.Tensor, target: torch.Tensor) -> float:
    """‖prediction − target‖² / ‖target‖² over all elements (float64 sums)."""
    return float((prediction.detach().double() - target.double()).pow(2).sum() / target.double().pow(2).sum())


# Fewer calibration tokens than this many per FFN unit and a fit can match the calibration text better while
# matching new text worse (seen: 4,096 tokens for 1,024 units lowered held-out cosine 0.872 → 0.860).
MIN_TOKENS_PER_UNIT = 8


def check_calibration_tokens(tokens: int, intermediate_size: int) -> None:
    """Refuse an underdetermined closed-form fit (ValueError: `tokens` <= `intermediate_size` + 1 unknowns per
    output); warn below `MIN_TOKENS_PER_UNIT` tokens per unit."""
    recommended = MIN_TOKENS_PER_UNIT * intermediate_size
    if tokens <= intermediate_size + 1:
        raise ValueError(
            f"--layerwise_tokens: {tokens} calibration tokens cannot determine a down projection of "
            f"{intermediate_size} units (needs more than {intermediate_size + 1}; at least "
            f"{recommended} recommended): give more text or tokens"
        )
    if tokens < recommended:
        logger.warning(
            "layer-wise healing on %d calibration tokens for %d FFN units (< %d per unit): the fit may "
            "match the calibration text and lose agreement on other text; use --layerwise_tokens >= %d",
            tokens,
            intermediate_size,
            MIN_TOKENS_PER_UNIT,
            recommended,
        )


def calibration_digest(input_ids: torch.Tensor) -> str:
    """SHA-256 of the calibration token ids (blocks, seq) as int64, shape included (other blocks: other contexts)."""
    digest = hashlib.sha256(str(tuple(input_ids.shape)).encode())
    digest.update(input_ids.to(torch.int64).contiguous().numpy().tobytes())
    return digest.hexdigest()


def check_resume_arguments(work_dir: Path, arguments: dict[str, Any]) -> None:
    """Create `work_dir`; ValueError (naming each flag, then and now) if its finished fits were made with other
    `arguments` (`arguments.json`, written afresh while no fit is finished)."""
    path = work_dir / "arguments.json"
    finished = sorted(work_dir.glob("layer-*.json")) + [p for p in [work_dir / "final_norm.json"] if p.is_file()]
    if finished and path.is_file():
        saved = json.loads(path.read_text())
        changed = [
            "other calibration tokens (--train_files, --max_seq_length, --max_train_samples, --layerwise_tokens)"
            if k == "calibration_sha256"
            else f"--{k} {saved.get(k)!r} there, {v!r} now"
            for k, v in arguments.items()
            if saved.get(k, v) != v
        ]
        if changed:
            raise ValueError(
                f"{work_dir} holds layers fitted with other layer-wise arguments ({', '.join(changed)}); "
                "use another --output_dir, or the same arguments to resume"
            )
    if finished:
        return
    work_dir.mkdir(parents=True, exist_ok=True)
    with atomic_output_file(path) as tmp:
        Path(tmp).write_text(json.dumps(arguments, indent=2) + "\n")


def save_layer(work_dir: Path, name: str, module: nn.Module, record: dict) -> None:
    """Write `name`.safetensors (the module's state) and `name`.json (the record), each atomically."""
    with atomic_output_file(work_dir / f"{name}.safetensors") as tmp:
        save_file({k: v.contiguous() for k, v in module.state_dict().items()}, str(tmp))
    with atomic_output_file(work_dir / f"{name}.json") as tmp:
        Path(tmp).write_text(json.dumps(record, indent=2) + "\n")


def load_layer(work_dir: Path, name: str, module: nn.Module) -> dict | None:
    """The record of a finished `name`, its weights loaded into `module`; None if not done."""
    weights, record = work_dir / f"{name}.safetensors", work_dir / f"{name}.json"
    if not (weights.is_file() and record.is_file()):
        return None
    module.load_state_dict(load_file(str(weights)))
    return {**json.loads(record.read_text()), "resumed": True}
