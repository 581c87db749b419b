"""The end-to-end stage of `hf-ffn heal` (`distill`): a converted FfnBert (the student) distilled from its source
checkpoint (the teacher) by `DistillationTrainer`, on the parameters `select_trainable` picks.

Loss (`DistillationLoss`), at real tokens (attention_mask 1) only:

    hidden  mean over tokens of  ‖h_s − h_t‖² / hidden     ("mse", default), or  1 − cos(h_s, h_t)  ("cosine")
            on `last_hidden_state` ("last", default) or averaged over every hidden state ("all": the embedding
            output and each layer's output, as TinyBERT's hidden-state loss, Jiao et al. 2020, Eq. 7-9)
    + w · T² · KL(softmax(z_t / T) ‖ softmax(z_s / T))   on MLM logits (Hinton et al. 2015), when w > 0

MSE drives |Δ| to 0; a cosine loss (DistilBERT, Sanh et al. 2019) leaves each norm free. Dropout is off in the student
and the teacher is in eval mode, so a student equal to the teacher gets loss and gradients exactly 0.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn
from transformers import Trainer, TrainerCallback, TrainingArguments, default_data_collator

from ..training.collators import PaddingFreeCollator

if TYPE_CHECKING:
    from .run import HealArguments

HIDDEN_LOSSES = ("mse", "cosine")
LAYER_CHOICES = ("last", "all")
# Which parameters train (`select_trainable`; docs/healing.md, "Methods"): the FFNs; with every LayerNorm; every
# encoder layer and final_norm; everything the loss reaches.
TRAIN_PARTS = ("ffn", "ffn_norms", "encoder", "all")
# The MLM heads the KL term reads (`encoder_outputs`' logits), in-memory names: BERT's `cls.predictions` (also
# FfnBertForPreTraining's; not its `cls.seq_relationship`), RoBERTa's `lm_head`, ELECTRA's generator head.
MLM_HEAD_PREFIXES = ("cls.predictions.", "lm_head.", "generator_predictions.", "generator_lm_head.")
MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids", "position_ids")


def select_trainable(model: nn.Module, parts: str, with_head: bool = False) -> list[str]:
    """Set `requires_grad` on each parameter of `model` for `parts` (`TRAIN_PARTS`): only where the loss reaches it;
    a head's (outside `model.base_model`) only with the KL term (`with_head`), in the MLM head it reads
    (`MLM_HEAD_PREFIXES`), for "all" (its LayerNorm also for "ffn_norms"). Returns the trainable names.

    Raises:
        ValueError: an unknown `parts`, or none selected.
    """
    if parts not in TRAIN_PARTS:
        raise ValueError(f"--train_parts has unknown value {parts!r}; allowed: {', '.join(TRAIN_PARTS)}")
    base_prefix = None if getattr(model, "base_model", model) is model else model.base_model_prefix

    def trainable(name: str) -> bool:
        is_norm = "LayerNorm" in name or "mlp_norm" in name or "final_norm" in name
        if "pooler." in name:
            return False
        if base_prefix is not None and not name.startswith(f"{base_prefix}."):  # a head's
            reached = with_head and name.startswith(MLM_HEAD_PREFIXES)
            return reached and (parts == "all" or (parts == "ffn_norms" and is_norm))
        if parts == "ffn":
            return ".mlp." in name
        if parts == "ffn_norms":
            return ".mlp." in name or is_norm
        return "encoder." in name if parts == "encoder" else True

    names = []
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(trainable(name))
        names += [name] if parameter.requires_grad else []
    if not names:
        raise ValueError(f"--train_parts {parts!r} selects no parameter of {type(model).__name__}")
    return names


def distill(
    student: nn.Module,
    teacher: nn.Module,
    blocks,
    heal_args: HealArguments,
    training_args: TrainingArguments,
    callbacks: list,
    resume: str | None,
) -> tuple[nn.Module, list[dict], int, float, bool]:
    """Distil `student` from `teacher` on `blocks`, dropout off (with --padding_free: packed batches, run unpadded),
    stopped after --max_train_minutes if given.

    Returns:
        (the student, unwrapped, in eval mode; Trainer's log_history; steps; train seconds; stopped by the time budget).
    """
    time_budget = TimeBudgetCallback(heal_args.max_train_minutes) if heal_args.max_train_minutes else None
    trainer = DistillationTrainer(
        model=student,
        args=training_args,
        train_dataset=blocks,
        data_collator=PaddingFreeCollator() if heal_args.padding_free else default_data_collator,  # blocks: one row
        teacher=teacher,
        distillation_loss=heal_args.loss,
        callbacks=[*callbacks, *([time_budget] if time_budget else [])],
    )
    # padding-free batches run packed (unpad_tokens: each block's attention over its own keys, docs/unpadded.md)
    unpadded = _set_during([teacher.config, student.config], "unpad_tokens", True)
    with dropout_off(student), unpadded if heal_args.padding_free else contextlib.nullcontext():
        train_output = trainer.train(resume_from_checkpoint=resume)
    student = trainer.accelerator.unwrap_model(trainer.model).eval()  # under FSDP trainer.model is the wrapper
    state = trainer.state
    stopped = bool(time_budget and time_budget.stopped)
    return student, state.log_history, state.global_step, train_output.metrics["train_runtime"], stopped


class DistillationTrainer(Trainer):
    """`Trainer` whose loss (`compute_loss`, the only override) is `DistillationLoss` between the student (`model`)
    and a frozen, unwrapped `teacher`; a mean over real tokens, so Trainer divides it by the accumulation steps."""

    def __init__(self, *args, teacher: nn.Module, distillation_loss: DistillationLoss, **kwargs):
        super().__init__(*args, **kwargs)
        self.teacher = teacher.to(self.args.device).eval().requires_grad_(False)
        self.distillation_loss = distillation_loss
        self.loss_is_scaled_for_ga = False

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        inputs = {k: v for k, v in inputs.items() if k in MODEL_INPUTS}
        loss_fn = self.distillation_loss
        all_layers = loss_fn.layers == "all"
        with torch.no_grad():
            teacher = encoder_outputs(self.teacher, self.teacher.base_model, inputs, all_layers)
        student = encoder_outputs(model, self.accelerator.unwrap_model(model).base_model, inputs, all_layers)
        loss = loss_fn(student, teacher, inputs["attention_mask"])
        return (loss, student) if return_outputs else loss


@dataclass(frozen=True)
class DistillationLoss:
    """The distillation loss of the module docstring (ValueError on an unknown `hidden_loss` / `layers`, a
    `mlm_kl_weight` w < 0 or a `temperature` T <= 0)."""

    hidden_loss: str = "mse"
    layers: str = "last"
    mlm_kl_weight: float = 0.0
    temperature: float = 1.0

    def __post_init__(self) -> None:
        for name, allowed in (("hidden_loss", HIDDEN_LOSSES), ("layers", LAYER_CHOICES)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"--{name} has unknown value {getattr(self, name)!r}; allowed: {', '.join(allowed)}")
        if self.mlm_kl_weight < 0:
            raise ValueError(f"--mlm_kl_weight must be >= 0, got {self.mlm_kl_weight}")
        if self.temperature <= 0:
            raise ValueError(f"--temperature must be > 0, got {self.temperature}")

    def hidden_term(self, student: torch.Tensor, teacher: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """(batch, seq, hidden) × 2, (batch, seq) bool → scalar: mean over real tokens."""
        s, t = student[mask].float(), teacher[mask].float()  # (tokens, hidden)
        if self.hidden_loss == "mse":
            return F.mse_loss(s, t)
        return (1.0 - F.cosine_similarity(s, t, dim=-1)).mean()

    def __call__(self, student: dict[str, Any], teacher: dict[str, Any], attention_mask: torch.Tensor) -> torch.Tensor:
        """`student` / `teacher`: {"last_hidden_state", "hidden_states" (with layers="all"), "logits" (with w > 0)}."""
        mask = attention_mask.bool()
        if self.layers == "last":
            loss = self.hidden_term(student["last_hidden_state"], teacher["last_hidden_state"], mask)
        else:
            pairs = list(zip(student["hidden_states"], teacher["hidden_states"], strict=True))
            loss = sum(self.hidden_term(s, t, mask) for s, t in pairs) / len(pairs)
        if self.mlm_kl_weight > 0:
            T = self.temperature
            s_log = F.log_softmax(student["logits"][mask].float() / T, dim=-1)  # (tokens, vocab)
            t_log = F.log_softmax(teacher["logits"][mask].float() / T, dim=-1)
            kl = F.kl_div(s_log, t_log, log_target=True, reduction="none").sum(-1).mean()
            loss = loss + self.mlm_kl_weight * T * T * kl
        return loss


def encoder_outputs(
    model: nn.Module, base_model: nn.Module, inputs: dict[str, torch.Tensor], hidden_states: bool
) -> dict[str, Any]:
    """One forward of `model` (possibly DDP-wrapped, so the call goes through it), `base_model`'s own output
    captured by a hook (a head's output has no `last_hidden_state`).

    Returns:
        {"last_hidden_state": (batch, seq, hidden), "hidden_states": tuple or None, "logits": MLM logits or None}.
    """
    captured: dict[str, Any] = {}
    handle = base_model.register_forward_hook(lambda module, args, output: captured.update(output=output))
    try:
        outputs = model(**inputs, output_hidden_states=hidden_states, return_dict=True)
    finally:
        handle.remove()
    base = captured["output"]
    logits = outputs.get("logits", outputs.get("prediction_logits"))
    return {"last_hidden_state": base.last_hidden_state, "hidden_states": base.hidden_states, "logits": logits}


class TimeBudgetCallback(TrainerCallback):
    """Stop training after `minutes` of this process's training (`hf-ffn heal --max_train_minutes`), saving a
    checkpoint at the step it stops at. `stopped` is True when it stopped the run."""

    def __init__(self, minutes: float) -> None:
        self.seconds, self.start, self.stopped = 60 * minutes, None, False

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        if time.perf_counter() - self.start >= self.seconds and state.global_step < state.max_steps:
            control.should_training_stop = control.should_save = self.stopped = True
        return control


def dropout_off(model: nn.Module) -> contextlib.AbstractContextManager[None]:
    """Set `p = 0` on every `nn.Dropout` of `model` for the block, then restore each."""
    return _set_during([module for module in model.modules() if isinstance(module, nn.Dropout)], "p", 0.0)


@contextlib.contextmanager
def _set_during(objects: list[Any], name: str, value: Any) -> Iterator[None]:
    """Set attribute `name` of each object to `value` for the block, then restore each."""
    saved = [(obj, getattr(obj, name)) for obj in objects]
    for obj, _ in saved:
        setattr(obj, name, value)
    try:
        yield
    finally:
        for obj, old in saved:
            setattr(obj, name, old)
