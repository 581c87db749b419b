"""The work folder of layer-wise healing and its model-card section: each finished fit's weights and record
(`layer-<i>.safetensors`/`.json`, `final_norm.*`), from which a rerun resumes, and the arguments they were fitted
with (`arguments.json`), so that a rerun with other ones is refused."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from ..files import atomic_output_file


def save_layer(work_dir: Path, name: str, module: nn.Module, record: dict) -> None:
    """Write `name`.safetensors (the module's state) and `name`.json (the record), each atomically."""
    with atomic_output_file(work_dir / f"{name}.safetensors") as tmp:
        save_file({k: v.contiguous() for k, v in module.state_dict().items()}, str(tmp))
    with atomic_output_file(work_dir / f"{name}.json") as tmp:
        Path(tmp).write_text(json.dumps(record, indent=2) + "\n")


def load_layer(work_dir: Path, name: str, module: nn.Module) -> dict | None:
    """The record of a finished `name`, its weights loaded into `module` (shapes must match); None if not done."""
    weights, record = work_dir / f"{name}.safetensors", work_dir / f"{name}.json"
    if not (weights.is_file() and record.is_file()):
        return None
    module.load_state_dict(load_file(str(weights)))
    return {**json.loads(record.read_text()), "resumed": True}


def finished_records(work_dir: Path) -> list[Path]:
    """The records of the fits finished in `work_dir`."""
    return sorted(work_dir.glob("layer-*.json")) + [p for p in [work_dir / "final_norm.json"] if p.is_file()]


def calibration_digest(input_ids: torch.Tensor) -> str:
    """SHA-256 of the calibration token ids (blocks, seq) as int64, shape included (other blocks: other contexts)."""
    digest = hashlib.sha256(str(tuple(input_ids.shape)).encode())
    digest.update(input_ids.to(torch.int64).contiguous().numpy().tobytes())
    return digest.hexdigest()


def describe_change(key: str, old: Any, new: Any) -> str:
    """One changed entry of `arguments.json`, as the flags that set it."""
    if key == "calibration_sha256":
        return "other calibration tokens (--train_files, --max_seq_length, --max_train_samples, --layerwise_tokens)"
    return f"--{key} {old!r} there, {new!r} now"


def check_resume_arguments(work_dir: Path, arguments: dict[str, Any]) -> None:
    """Create `work_dir` and make sure its finished layers were fitted with `arguments` (recorded in
    `arguments.json`, written afresh while no layer is finished).

    Raises:
        ValueError: the folder's layers were fitted with other arguments (naming each flag, then and now).
    """
    path = work_dir / "arguments.json"
    finished = finished_records(work_dir)
    if finished and path.is_file():
        saved = json.loads(path.read_text())
        changed = {k: (saved.get(k), v) for k, v in arguments.items() if saved.get(k, v) != v}
        if changed:
            raise ValueError(
                f"{work_dir} holds layers fitted with other layer-wise arguments ("
                + ", ".join(describe_change(k, old, new) for k, (old, new) in changed.items())
                + "); use another --output_dir, or the same arguments to resume"
            )
    if finished:
        return
    work_dir.mkdir(parents=True, exist_ok=True)
    with atomic_output_file(path) as tmp:
        Path(tmp).write_text(json.dumps(arguments, indent=2) + "\n")


def _fmt(record: dict, key: str) -> str:
    return f"{record[key]:.4g}" if key in record else "-"


def layerwise_section(record: dict | None) -> str:
    """The model card's "Layer-wise healing" section (empty without a layer-wise stage)."""
    if not record:
        return ""
    a = record["arguments"]
    rows = [
        f"| {r['layer']} | {_fmt(r, 'ffn_rel_error_before')} → {_fmt(r, 'ffn_rel_error')} | "
        f"{_fmt(r, 'layer_rel_error_before')} → {_fmt(r, 'layer_rel_error')} | {_fmt(r, 'propagated_rel_error')} | "
        f"{_fmt(r, 'stream_norm')} |"
        for r in record["layers"]
    ]
    final = record.get("final_norm")
    norm = (
        f"\n`final_norm` set in closed form (per coordinate least squares): relative squared error "
        f"{final['final_norm_rel_error_before']:.4g} → {final['final_norm_rel_error']:.4g}.\n"
        if final
        else ""
    )
    free = [str(r["layer"]) for r in record["layers"] if r.get("free_stream")]  # `free` where the norms differ
    stream = (
        f"residual stream `free` (layers {', '.join(free)}): the student's and the teacher's hidden states are "
        "compared after a LayerNorm without affine part (per-token scale and mean not fitted)."
        if free
        else "hidden states compared as they are."
    )
    return f"""
## Layer-wise healing

Each layer was fitted to its teacher layer (`hf_ffn.healing.layerwise`) on {record["tokens"]:,} calibration tokens
({record["blocks"]} blocks; recorded activations {record["activation_bytes"] / 1e6:.0f} MB, cap
{a["layerwise_memory_mb"]:.0f} MB): parts `{a["layerwise_parts"]}`, inputs `{a["layerwise_inputs"]}`,
{a["layerwise_steps"]} Adam steps per fit (learning rate {a["layerwise_lr"]}, {a["layerwise_batch_tokens"]} tokens per
step), closed-form ridge down projection (ridge {a["layerwise_ridge"]}), {record["seconds"]:.0f} s in all.
Relative squared error ‖Δ‖²/‖target‖² on the calibration tokens: the FFN output (teacher FFN input), the layer
output (the layer's fitting input) and the student's own hidden state after the layer (its errors propagated);
{stream} The last column is the mean per-token norm of the student's hidden state after the layer (for Pre-LN
the residual stream, before `final_norm`).

| layer | FFN output | layer output | propagated hidden state | hidden-state norm |
|---|---|---|---|---|
{chr(10).join(rows)}
{norm}"""


__all__ = [
    "calibration_digest",
    "check_resume_arguments",
    "describe_change",
    "finished_records",
    "layerwise_section",
    "load_layer",
    "save_layer",
]
