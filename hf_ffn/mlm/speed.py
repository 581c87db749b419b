"""The CUDA speed defaults of `hf-ffn mlm` and the fixed number of positions sparse prediction decodes per batch
(static shapes); docs/pretraining.md, "On a GPU"."""

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
    """`hf_ffn/mlm/recipes/cuda.json` on CUDA (`{}` elsewhere), at most `cpu_count // 2` loader workers, less the
    options in `given` (a given `torch_compile` also keeps its mode, `dataloader_num_workers` its persistence)."""
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
    """Set `device_speed_defaults` (of the run's device unless `device_type`) on whichever of `arguments` or
    `training_args` has each option, log and return them (`torch_compile` with the "inductor" backend)."""
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
    """Switch `training_args` to bf16 mixed precision when neither `bf16` nor `fp16` was asked for (nor "bf16" in
    `given`: `--bf16 false`) and a CUDA device supports it; returns whether the run trains in bf16."""
    if (
        not (training_args.bf16 or training_args.fp16 or training_args.use_cpu or "bf16" in given)
        and torch.cuda.is_available()
        and torch.cuda.is_bf16_supported()
    ):
        training_args.bf16 = True
        training_args.mixed_precision = "bf16"
    return bool(training_args.bf16)


def options_given_by_value(*arguments) -> set[str]:
    """The options of `arguments` (dataclasses) whose values differ from their defaults."""
    given = set()
    for args in arguments:
        for spec in dataclasses.fields(args):
            if spec.default is dataclasses.MISSING or not spec.init:
                continue
            if getattr(args, spec.name, spec.default) != spec.default:
                given.add(spec.name)
    return given


def prediction_rows(positions: int, mlm_probability: float) -> int:
    """The positions sparse prediction decodes in a batch of `positions` tokens masked with `mlm_probability`: the
    mean masked count plus `ROWS_SIGMAS` binomial standard deviations, rounded up to a multiple of `ROWS_MULTIPLE`, at
    most `positions` (4,096 at 0.15: 752 rows for a mean of 614)."""
    if positions < 1:
        raise ValueError(f"positions has value {positions!r}; allowed: an integer >= 1")
    if not 0 < mlm_probability < 1:
        raise ValueError(f"--mlm_probability has value {mlm_probability!r}; allowed: a number > 0 and < 1")
    bound = positions * mlm_probability + ROWS_SIGMAS * math.sqrt(positions * mlm_probability * (1 - mlm_probability))
    return min(positions, ROWS_MULTIPLE * math.ceil(bound / ROWS_MULTIPLE))


def prediction_positions(labels: torch.Tensor, rows: int) -> torch.Tensor:
    """The flat positions (into `labels.flatten()`, -100 where not scored) sparse prediction decodes: int64 (rows,),
    the labelled ones, then unlabelled ones (the loss ignores them), each in row-major order; all when more than
    `rows` are labelled."""
    unlabelled = (labels.flatten() == IGNORE_INDEX).to(torch.int8)
    order = torch.argsort(unlabelled, stable=True)  # labelled (0) first, each group in row-major order
    labelled = unlabelled.numel() - int(unlabelled.sum())
    return order if labelled > rows else order[:rows]
