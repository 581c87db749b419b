"""Per-device speed defaults of `hf-ffn mlm` (`device_speed_defaults`) and the fixed number of decoded positions
per batch that sparse prediction gets from them (`prediction_rows`, `prediction_positions`).

On a CUDA device a small model's training step is Python, kernel-launch and host-device synchronisation overhead,
not arithmetic. The defaults below remove it with transformers' and torch's own switches; a CPU run gets none of
them (its behaviour is unchanged). Each applies only where the user did not give the option; `--speed_defaults
false` turns them all off (today's path), giving an option turns that one off (e.g. `--torch_compile false`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os

import torch
from transformers import TrainingArguments
from transformers.utils import logging as hf_logging

from .metrics import IGNORE_INDEX
from .recipe import read_recipe

logger = hf_logging.get_logger(__name__)

ROWS_MULTIPLE = 8  # the fixed row count is a multiple of this (tensor-core-friendly matmul shapes)
ROWS_SIGMAS = 6.0  # the row count covers the mean masked count + this many standard deviations (overflow ~1e-9)
CUDA_RECIPE = "cuda"  # hf_ffn/mlm/recipes/cuda.json


def device_speed_defaults(device_type: str, given: set[str], cpu_count: int | None = None) -> dict:
    """The speed options `hf-ffn mlm` sets on `device_type` ("cuda", "cpu", ...), less the ones in `given` (the
    options the user gave, by name). `{}` off CUDA.

    On CUDA, the values of `hf_ffn/mlm/recipes/cuda.json` (`TrainingArguments` options, then `PretrainingArguments`
    ones):
    - `torch_compile=True` (Trainer's own: the model is compiled by inductor, fewer and fused kernels) with
      `torch_compile_mode="reduce-overhead"` (CUDA graphs: a step's kernels replayed in one launch; the training
      shapes are static with `fixed_prediction_rows`); a given `torch_compile` leaves the mode to the user;
    - `accelerator_config={"non_blocking": True}`: the batch's host-to-device copies do not wait for the GPU (from
      the loader's pinned memory; without it each step waited once per tensor in the batch);
    - `logging_nan_inf_filter=False` (Trainer otherwise reads every step's loss back to test it for nan/inf: a
      host-device synchronisation per step);
    - `dataloader_num_workers` (the file's 4, at most cpu_count // 2) and `dataloader_persistent_workers=True`:
      batches are collated and masked in worker processes while the GPU computes (pinned memory is Trainer's default); a
      given `dataloader_num_workers` leaves both to the user;
    - `unpad_tokens=False`: the packed blocks have no padding, and looking for it reads the mask back every step;
    - `fixed_prediction_rows=True`: sparse prediction decodes a fixed number of positions per batch
      (`prediction_rows`), so shapes are static for the compiled graph and no masked count is read back.

    The fused AdamW (`optim="adamw_torch_fused"`) is already `TrainingArguments`' default on torch >= 2.8.

    Raises:
        ValueError: on a `cpu_count` below 1.
    """
    if device_type != "cuda":
        return {}
    cpu_count = (os.cpu_count() or 1) if cpu_count is None else cpu_count
    if cpu_count < 1:
        raise ValueError(f"cpu_count has value {cpu_count!r}; allowed: an integer >= 1")
    defaults = read_recipe(CUDA_RECIPE)
    workers = min(defaults["dataloader_num_workers"], cpu_count // 2)  # at most half the cores
    defaults["dataloader_num_workers"] = workers
    defaults["dataloader_persistent_workers"] = defaults["dataloader_persistent_workers"] and workers > 0
    if "dataloader_num_workers" in given:  # persistent workers need workers: the user's choice decides both
        given = given | {"dataloader_persistent_workers"}
    if "torch_compile" in given:  # compiling or not is the user's choice, and so how
        given = given | {"torch_compile_mode"}
    return {name: value for name, value in defaults.items() if name not in given}


def apply_speed_defaults(
    arguments: tuple, training_args: TrainingArguments, given: set[str], device_type: str | None = None
) -> dict:
    """Set `device_speed_defaults(device_type, given)` (`device_type`: the run's, `training_args.device.type`,
    unless given) on whichever of `arguments` (dataclasses: `PretrainingArguments`, ...) or `training_args` has
    each option, log them once, and return them.
    Switching `torch_compile` on after `TrainingArguments` was built also sets what its construction derives
    from it: `torch_compile_backend` "inductor" when none was given (TF32 is left as it is: an fp32 run stays
    fp32)."""
    device_type = training_args.device.type if device_type is None else device_type
    chosen = device_speed_defaults(device_type, given)
    for name, value in chosen.items():
        if name == "accelerator_config":  # fields of the `AcceleratorConfig` that `TrainingArguments` built
            for field, setting in value.items():
                setattr(training_args.accelerator_config, field, setting)
            continue
        target = training_args if hasattr(training_args, name) else next(a for a in arguments if hasattr(a, name))
        setattr(target, name, value)
    if chosen.get("torch_compile") and training_args.torch_compile_backend is None:
        training_args.torch_compile_backend = "inductor"
    if chosen and training_args.process_index == 0:
        listed = ", ".join(
            f"--{name} {json.dumps(value) if isinstance(value, dict) else str(value).lower()}"
            for name, value in chosen.items()
        )
        logger.warning(f"speed defaults on {device_type} (--speed_defaults false: none of them): {listed}")
    return chosen


def use_bf16_where_available(training_args: TrainingArguments, given: set[str] = frozenset()) -> bool:
    """Switch `training_args` to bf16 mixed precision (`bf16`, and `mixed_precision`, which `TrainingArguments`
    derives from it at construction) when neither `bf16` nor `fp16` was asked for and a CUDA device supports bf16.
    `given`: the options the user gave; an explicit `--bf16 false` ("bf16" in `given`) keeps fp32. Returns whether
    the run trains in bf16."""
    if (
        not (training_args.bf16 or training_args.fp16 or training_args.use_cpu or "bf16" in given)
        and torch.cuda.is_available()
        and torch.cuda.is_bf16_supported()
    ):
        training_args.bf16 = True
        training_args.mixed_precision = "bf16"
    return bool(training_args.bf16)


def options_given_by_value(*arguments) -> set[str]:
    """The options of `arguments` (dataclass instances) whose values differ from their fields' defaults: what a
    caller of `run_pretraining` without a command line "gave"."""
    given = set()
    for args in arguments:
        for spec in dataclasses.fields(args):
            if spec.default is dataclasses.MISSING or not spec.init:
                continue
            if getattr(args, spec.name, spec.default) != spec.default:
                given.add(spec.name)
    return given


def prediction_rows(positions: int, mlm_probability: float) -> int:
    """The number of positions sparse prediction decodes in a batch of `positions` tokens whose tokens are masked
    independently with `mlm_probability`: the mean masked count plus `ROWS_SIGMAS` binomial standard deviations,
    rounded up to a multiple of `ROWS_MULTIPLE`, at most `positions` (e.g. 4,096 at 0.15: 752 rows for a mean of
    614). A batch with more masked positions decodes all of its positions (`prediction_positions`).

    Raises:
        ValueError: on `positions` < 1 or `mlm_probability` outside (0, 1).
    """
    if positions < 1:
        raise ValueError(f"positions has value {positions!r}; allowed: an integer >= 1")
    if not 0 < mlm_probability < 1:
        raise ValueError(f"--mlm_probability has value {mlm_probability!r}; allowed: a number > 0 and < 1")
    bound = positions * mlm_probability + ROWS_SIGMAS * math.sqrt(positions * mlm_probability * (1 - mlm_probability))
    return min(positions, ROWS_MULTIPLE * math.ceil(bound / ROWS_MULTIPLE))


def prediction_positions(labels: torch.Tensor, rows: int) -> torch.Tensor:
    """The flat positions (into `labels.flatten()`) sparse prediction decodes: every labelled position
    (`labels != -100`) in row-major order, then unlabelled ones in row-major order up to `rows` in all (their
    labels are -100, so the loss ignores them); all positions when more than `rows` are labelled. Computed on the
    CPU by the collator, so the model never reads the masked count back from the device.

    Args:
        labels: (batch, seq) or any shape, -100 where a position is not scored.
        rows: the fixed count (`prediction_rows`).

    Returns:
        int64 (rows,), or (labels.numel(),) when more than `rows` positions are labelled.
    """
    unlabelled = (labels.flatten() == IGNORE_INDEX).to(torch.int8)
    order = torch.argsort(unlabelled, stable=True)  # labelled (0) first, each group in row-major order
    labelled = unlabelled.numel() - int(unlabelled.sum())
    return order if labelled > rows else order[:rows]


__all__ = [
    "apply_speed_defaults",
    "device_speed_defaults",
    "options_given_by_value",
    "prediction_positions",
    "prediction_rows",
    "use_bf16_where_available",
]
