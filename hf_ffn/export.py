"""ONNX export of hf_ffn models with dynamic batch and sequence axes (`export_onnx`, over PyTorch's
`torch.export`-based exporter) and a check against PyTorch (`onnx_max_abs_diff`). An FfnRoberta graph takes
`input_ids` and `attention_mask` and computes upstream's positions inside it; FfnBert and FfnElectra graphs take
BERT's three inputs. Why this exporter, and the graphs' inputs: docs/export.md.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import torch

from .conversion.measure import padded_batch, tensor_difference, usable_positions
from .files import atomic_output_file
from .modeling_ffn_bert import FfnBertPreTrainedModel
from .modeling_ffn_roberta import FfnRobertaPreTrainedModel

ONNX_INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")  # an FfnBert graph's
ROBERTA_ONNX_INPUT_NAMES = ("input_ids", "attention_mask")  # an FfnRoberta graph's: RoBERTa's tokenizer gives these
MIN_OPSET = 18  # the torch.export-based exporter's onnxscript function library starts there
EXPORTABLE_ATTENTION = ("eager", "sdpa")  # flash / flex attention kernels have no ONNX translation


def example_inputs(
    vocab_size: int,
    batch_size: int = 2,
    seq_len: int = 8,
    seed: int = 0,
    *,
    pad_token_id: int = 0,
    input_names: tuple[str, ...] = ONNX_INPUT_NAMES,
) -> dict[str, torch.Tensor]:
    """A padded batch (row i has `seq_len - i` real tokens, at least 1; pads `pad_token_id`; two segments in row 0
    when `input_names` has `token_type_ids`): each of `input_names` (batch_size, seq_len) int64, in that order."""
    lengths = [max(1, seq_len - row) for row in range(batch_size)]
    starts = [seq_len // 2] + [None] * (batch_size - 1) if "token_type_ids" in input_names else None
    batch = padded_batch(vocab_size, lengths, starts, seed=seed, seq_len=seq_len, pad_token_id=pad_token_id)
    return {name: batch[name] for name in input_names}  # the graph's input order: `export_onnx` passes kwargs


def onnx_input_names(model: FfnBertPreTrainedModel) -> tuple[str, ...]:
    """The graph inputs of `model`: `ROBERTA_ONNX_INPUT_NAMES` for FfnRoberta, else (FfnBert, FfnElectra: BERT's
    tokenizer) `ONNX_INPUT_NAMES`."""
    return ROBERTA_ONNX_INPUT_NAMES if isinstance(model, FfnRobertaPreTrainedModel) else ONNX_INPUT_NAMES


def model_example_inputs(
    model: FfnBertPreTrainedModel, batch_size: int = 2, seq_len: int = 8, seed: int = 0
) -> dict[str, torch.Tensor]:
    """`example_inputs` as `model` takes them: its vocabulary, its pad id (RoBERTa's 1), its `onnx_input_names`."""
    config = model.config
    pad = config.pad_token_id or 0
    return example_inputs(
        config.vocab_size, batch_size, seq_len, seed, pad_token_id=pad, input_names=onnx_input_names(model)
    )


def _check_exportable(model: torch.nn.Module, opset_version: int | None) -> None:
    if not isinstance(model, FfnBertPreTrainedModel):
        raise TypeError(
            f"model must be an hf_ffn model (FfnBert, FfnRoberta or FfnElectra: FfnBertPreTrainedModel), got "
            f"{type(model).__name__}"
        )
    if model.training:
        raise ValueError("model is in training mode (dropout would be exported); call model.eval() first")
    attn = model.config._attn_implementation
    if attn not in EXPORTABLE_ATTENTION:
        raise ValueError(
            f"attn_implementation={attn!r} cannot be exported to ONNX; allowed: {', '.join(EXPORTABLE_ATTENTION)}"
        )
    if model.dtype != torch.float32:
        raise ValueError(f"model dtype is {model.dtype}; only torch.float32 export is supported (and verified)")
    for name in ("output_attentions", "output_hidden_states"):
        if getattr(model.config, name, False):
            raise ValueError(f"config.{name}=True is not supported for export; allowed: False")
    if model.config.unpad_tokens:
        raise ValueError(
            "config.unpad_tokens=True cannot be exported to ONNX (the unpadded path's packed token count depends on "
            "the attention mask, which torch.export cannot trace); set model.config.unpad_tokens = False before "
            "export: the weights are the same, and the padded path gives the same outputs at real tokens"
        )
    if opset_version is not None and opset_version < MIN_OPSET:
        raise ValueError(
            f"opset_version={opset_version} is not supported: the torch.export-based ONNX exporter needs >= {MIN_OPSET}"
        )


def export_onnx(
    model: FfnBertPreTrainedModel,
    path: str | os.PathLike,
    *,
    dynamic: bool = True,
    opset_version: int | None = None,
    batch_size: int = 2,
    seq_len: int = 8,
) -> Path:
    """Export an FfnBert, FfnRoberta or FfnElectra model (any FFN variant / LayerNorm placement) to one ONNX file,
    written atomically.

    The graph takes `onnx_input_names(model)` (FfnBert and FfnElectra: `input_ids`, `attention_mask`,
    `token_type_ids`; FfnRoberta: `input_ids`, `attention_mask`; int64, (batch, sequence)) and returns the model
    output's tensors under their names (e.g. `last_hidden_state` (batch, sequence, hidden_size)). With `dynamic=True`
    batch and sequence are symbolic (sequence ≤ the tokens the positions hold: `max_position_embeddings`, a RoBERTa's
    less `padding_idx + 1`), otherwise fixed to the traced example's (`batch_size`, `seq_len`; both ≥ 2:
    `torch.export` specialises sizes 0 and 1).

    Raises:
        TypeError: if `model` is not an hf_ffn model (FfnBert, FfnRoberta, FfnElectra).
        ValueError: model in training mode, attention other than eager/sdpa, a dtype other than float32,
            `output_attentions` / `output_hidden_states` or `unpad_tokens` set in the config, `opset_version` < 18, or
            `batch_size` / `seq_len` < 2 or `seq_len` above the tokens the positions hold.
    """
    _check_exportable(model, opset_version)
    max_len = usable_positions(model.config)
    if batch_size < 2 or not 2 <= seq_len <= max_len:
        held = "" if max_len == model.config.max_position_embeddings else ", less padding_idx + 1: RoBERTa's offset"
        raise ValueError(
            f"batch_size={batch_size} and seq_len={seq_len} must be >= 2 (torch.export specialises sizes 0 and 1) "
            f"and seq_len <= {max_len} (max_position_embeddings{held})"
        )
    input_names = onnx_input_names(model)
    inputs = model_example_inputs(model, batch_size, seq_len)
    with torch.no_grad():
        output_names = list(model(**inputs).keys())
    dynamic_shapes = None
    if dynamic:
        batch, sequence = torch.export.Dim("batch"), torch.export.Dim("sequence", max=max_len)
        dynamic_shapes = {name: {0: batch, 1: sequence} for name in input_names}

    program = torch.onnx.export(
        model,
        (),
        kwargs=inputs,
        dynamo=True,
        dynamic_shapes=dynamic_shapes,
        input_names=list(input_names),
        output_names=output_names,
        opset_version=opset_version,
        verbose=False,
    )
    with atomic_output_file(path, suffix=".onnx.tmp") as tmp:  # an ordinary file (umask), renamed at the end
        program.save(str(tmp), external_data=False)  # one self-contained file (models under the 2 GB protobuf limit)
    return Path(path)


def onnx_max_abs_diff(
    model: FfnBertPreTrainedModel, path: str | os.PathLike, inputs: Mapping[str, torch.Tensor]
) -> dict[str, float]:
    """`{output name: max |ONNX − PyTorch|}` over every position, padding included, for one batch of `inputs` (the
    graph's inputs: `onnx_input_names`), the graph run by onnxruntime's CPU provider."""
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = {graph_input.name: inputs[graph_input.name].numpy() for graph_input in session.get_inputs()}
    onnx_outputs = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds), strict=False))
    with torch.no_grad():
        torch_outputs = model(**inputs)
    return {
        name: tensor_difference(torch_outputs[name], torch.from_numpy(value))["max_abs_diff"]
        for name, value in onnx_outputs.items()
    }
