"""The healed folder (`save_healed`): a converted folder whose report has a `healing` entry and whose model card has
"Layer-wise healing" and "Healing" sections, with the difference from the source re-measured and the student's other
files kept."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

from ..conversion import REPORT_FILE, ConversionReport, measure_difference, write_converted_folder
from ..files import atomic_output_dir

# weight files of a student folder that the healed weights replace (not copied by `keep_student_files`)
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".h5", ".msgpack", ".ckpt", ".onnx")


def save_healed(folder: Path, student, tokenizer, teacher: torch.nn.Module, healing: dict) -> None:
    """Write the healed folder atomically: the student (from `healing["student"]`) with the difference re-measured
    against `teacher` (loaded from `healing["teacher"]`)."""
    student_dir, teacher_path = Path(healing["student"]), healing["teacher"]
    if (student_dir / REPORT_FILE).is_file():
        data = json.loads((student_dir / REPORT_FILE).read_text())
        previous, report = data.pop("healing", None), ConversionReport(**data)  # an earlier healing of this student
    else:  # a minimal report naming the teacher
        report = ConversionReport(source=teacher_path, model_class=type(student).__name__, init="unknown", exact=False)
        previous = None
    if previous is not None:
        healing = {**healing, "previous": previous}
    healing["fixed_input_difference_before"] = report.difference
    with atomic_output_dir(folder) as tmp:
        measure_difference(teacher_path, student, report, reference=teacher)
        write_converted_folder(
            tmp,
            student,
            report,
            tokenizer=tokenizer,
            report_extra={"healing": healing},
            card_section=healing_section(healing),
            model_name=f"{student_dir.name}-healed",
        )
        keep_student_files(student_dir, Path(tmp))


def keep_student_files(student_dir: Path, healed: Path) -> None:
    """Copy into `healed` every entry of `student_dir` it lacks (a sentence-transformers student's modules.json,
    1_Pooling/, ...), except top-level weight files and `checkpoint-N` folders."""
    for entry in sorted(student_dir.iterdir()):
        target = healed / entry.name
        if target.exists() or entry.name.startswith("checkpoint-"):
            continue
        if entry.is_dir():
            shutil.copytree(entry, target)
        elif entry.suffix not in WEIGHT_SUFFIXES:
            shutil.copy2(entry, target)


def _row(name: str, before: dict | None, after: dict | None, key: str, fmt: str) -> str:
    values = [format(d[key], fmt) if d else "-" for d in (before, after)]
    return f"| {name} | {values[0]} | {values[1]} |"


def healing_section(healing: dict) -> str:
    """The model card's "Healing" section: before/after table, budget and the exact command."""
    before, after = healing["before"] or {}, healing["after"] or {}
    b, a = before.get("agreement"), after.get("agreement")
    rows = [
        _row("sentence-embedding cosine to the teacher, mean", b, a, "cosine_mean", ".6f"),
        _row("sentence-embedding cosine to the teacher, min", b, a, "cosine_min", ".6f"),
        _row("last_hidden_state max abs diff (real tokens)", b, a, "max_abs_diff", ".4g"),
        _row("last_hidden_state mean abs diff (real tokens)", b, a, "mean_abs_diff", ".4g"),
    ]
    if "probe" in before and "probe" in after:
        pb, pa = before["probe"], after["probe"]
        rows += [
            f"| linear-probe accuracy, teacher | {pb['teacher']['accuracy']:.4f} | {pa['teacher']['accuracy']:.4f} |",
            f"| linear-probe accuracy, this model | {pb['student']['accuracy']:.4f} "
            f"| {pa['student']['accuracy']:.4f} |",
            f"| probe difference (this − teacher, paired folds) | {pb['difference']:+.4f} | {pa['difference']:+.4f} |",
        ]
    held, training, args, data = healing["heldout"], healing["training"], healing["arguments"], healing["data"]
    settings = (after.get("probe") or {}).get("student", {}).get("settings")
    probe = (
        f"{settings['folds']}-fold stratified cross-validation (seed {settings['seed']}) of "
        f"{settings['classifier']} with C={settings['C']}, max_iter={settings['max_iter']} on standardised "
        f"embeddings, the same folds for the teacher and this model"
        if settings
        else "not run"
    )
    on = "last_hidden_state" if args["layers"] == "last" else "every hidden state"
    kl = " + KL on MLM logits" if args["mlm_kl_weight"] else ""
    batch = training["per_device_train_batch_size"] * training["world_size"] * training["gradient_accumulation_steps"]
    files = ", ".join(map(str, data["train_files"])) if data.get("train_files") else f"`{data['dataset_name']}`"
    return (
        layerwise_section(healing.get("layerwise"))
        + f"""
## Healing (distillation from the source model)

This model was distilled from `{healing["teacher"]}` (frozen, eval mode) with hf_ffn's `heal`: loss
`{args["hidden_loss"]}` on {on}
at real tokens{kl}, dropout off in the student,
trained parts: `{healing["train_parts"]}` ({healing["trainable_parameters"]:,} parameters),
{healing["steps"]} optimizer steps of {batch} blocks × {data["block_tokens"]} tokens from
{files} (learning rate {training["learning_rate"]}, {training["lr_scheduler_type"]}
schedule, {training["warmup_steps"]} warm-up steps), {healing["train_seconds"]:.0f} s of training.

Measured on {held["snippets"]} held-out examples never trained on (`{held["eval_data"]}`); embeddings are mean-pooled
`last_hidden_state`; the linear probe is {probe}.

| | before healing | after healing |
|---|---|---|
{chr(10).join(rows)}

Command:

```bash
{healing["command"]}
```
"""
    )


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
