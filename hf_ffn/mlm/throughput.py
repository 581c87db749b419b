"""Training throughput in the log (`ThroughputCallback`): tokens per second and achieved GFLOP/s on every training
log line and the final one. Tokens are counted by a forward pre-hook (the non-padding tokens, and the labelled
positions the MLM head decodes under sparse prediction); seconds are training's, less evaluating and saving; FLOPs
are `hf_ffn.params.MlmFlops.training_flops` (3 × the forward matrix products, Kaplan et al. 2020). Counts are this
process's: under `torchrun` each logs its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
from transformers import TrainerCallback

from ..params import MlmFlops
from .metrics import IGNORE_INDEX


class ThroughputCallback(TrainerCallback):
    """Adds `train_tokens_per_second` and `train_gflops_per_second` (since the previous training log) to every
    training log line (and `state.log_history`), and the same over the whole run with `train_tokens` to the final
    one (replacing transformers' own `train_tokens_per_second`).

    Args:
        flops: the model's FLOP counts (`hf_ffn.params.mlm_flops`); `None`: tokens per second only.
        sparse_prediction: whether the MLM head decodes only the labelled positions (else every token).
        pad_token_id: the pad token, for batches without an attention mask.
        clock: seconds (a fake clock in tests); `time.perf_counter` by default.
    """

    def __init__(
        self,
        flops: MlmFlops | None = None,
        sparse_prediction: bool = True,
        pad_token_id: int | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ):
        self.flops, self.sparse_prediction = flops, sparse_prediction
        self.pad_token_id, self.clock = pad_token_id, clock
        self.tokens = self.decoded = 0  # since the last training log
        self.total_tokens = self.total_decoded = 0
        self.seconds = self.total_seconds = 0.0
        self.mark = None  # the clock when training (not evaluation or saving) last resumed
        self.hook = None

    # Counting -------------------------------------------------------------------------------------------------
    def count(self, module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        """Forward pre-hook: count a training batch, on its device (read back once per log line, not per step:
        reading a CUDA tensor waits for the GPU)."""
        if not module.training:
            return
        input_ids = kwargs.get("input_ids", args[0] if args else None)
        attention_mask, labels = kwargs.get("attention_mask"), kwargs.get("labels")
        if attention_mask is not None and attention_mask.dim() == 2:
            tokens = (attention_mask != 0).sum()  # also for masks that number the documents of a row
        elif input_ids is not None and self.pad_token_id is not None:
            tokens = (input_ids != self.pad_token_id).sum()
        else:
            tokens = input_ids.numel() if input_ids is not None else 0
        decoded = (labels != IGNORE_INDEX).sum() if labels is not None and self.sparse_prediction else tokens
        self.tokens = self.tokens + tokens
        self.decoded = self.decoded + decoded

    def rates(self, tokens: int, decoded: int, seconds: float) -> dict[str, float]:
        """Tokens per second and achieved GFLOP/s of `tokens` (and `decoded` head rows) in `seconds`."""
        if seconds <= 0:
            return {}
        rates = {"train_tokens_per_second": round(tokens / seconds, 3)}
        if self.flops is not None:
            rates["train_gflops_per_second"] = round(self.flops.training_flops(tokens, decoded) / seconds / 1e9, 3)
        return rates

    # Trainer events -------------------------------------------------------------------------------------------
    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if model is not None and self.hook is None:
            # run eagerly under torch.compile (a hook outside the compiled graph)
            self.hook = model.register_forward_pre_hook(torch.compiler.disable(self.count), with_kwargs=True)
        self.mark = self.clock()

    def on_step_end(self, args, state, control, **kwargs):
        now = self.clock()  # a step ends; logging, evaluation and saving follow
        self.seconds += now - self.mark
        self.mark = now

    def on_evaluate(self, args, state, control, **kwargs):
        self.mark = self.clock()  # training resumes now: the time since the last mark was not training

    on_save = on_evaluate

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs is None:
            return
        self.tokens, self.decoded = int(self.tokens), int(self.decoded)  # the one read-back per log line
        if "loss" in logs:  # a training log line
            added = self.rates(self.tokens, self.decoded, self.seconds)
            self.total_tokens += self.tokens
            self.total_decoded += self.decoded
            self.total_seconds += self.seconds
            self.tokens = self.decoded = 0
            self.seconds = 0.0
        elif "train_runtime" in logs:  # the final line: the whole run
            tokens, decoded = self.total_tokens + self.tokens, self.total_decoded + self.decoded
            added = {"train_tokens": tokens, **self.rates(tokens, decoded, self.total_seconds + self.seconds)}
        else:
            return
        logs.update(added)
        if state.log_history and state.log_history[-1].get("step") == state.global_step:
            state.log_history[-1].update(added)  # Trainer copied `logs` there before calling on_log

    def on_train_end(self, args, state, control, **kwargs):
        if self.hook is not None:
            self.hook.remove()
            self.hook = None
