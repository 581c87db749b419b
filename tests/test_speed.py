"""`hf-ffn mlm` at GPU speed, tested on the CPU (`hf_ffn.mlm.speed`): the per-device defaults, the fixed number
of decoded positions of sparse prediction against today's formula, no read-back from the device in the counting
and decoding paths, and fp32 one flag away."""

from __future__ import annotations

import pytest
import torch
from torch.overrides import TorchFunctionMode
from transformers import TrainingArguments

from hf_ffn.mlm.arguments import PretrainingArguments
from hf_ffn.mlm.run import pretraining_parser
from hf_ffn.mlm.speed import (
    apply_speed_defaults,
    device_speed_defaults,
    options_given_by_value,
    prediction_positions,
    prediction_rows,
    use_bf16_where_available,
)
from hf_ffn.mlm.trainer import FixedOrRandomMaskCollator, ThroughputCallback
from hf_ffn.modeling_ffn_bert import FfnBertForMaskedLM
from hf_ffn.training.arguments import given_options

from .conftest import TINY, assert_equal_but_row_count, tiny_config

CUDA_DEFAULTS = {
    "torch_compile": True,
    "torch_compile_mode": "reduce-overhead",
    "accelerator_config": {"non_blocking": True},
    "logging_nan_inf_filter": False,
    "dataloader_num_workers": 4,
    "dataloader_persistent_workers": True,
    "unpad_tokens": False,
    "fixed_prediction_rows": True,
}


# ---------------------------------------------------------------------------------------------------------------
# The per-device choice
# ---------------------------------------------------------------------------------------------------------------
def test_speed_defaults_on_cuda_only_and_only_where_not_given():
    assert device_speed_defaults("cpu", set(), cpu_count=16) == {}
    assert device_speed_defaults("mps", set(), cpu_count=16) == {}
    assert device_speed_defaults("cuda", set(), cpu_count=16) == CUDA_DEFAULTS
    left = device_speed_defaults("cuda", {"torch_compile", "unpad_tokens"}, cpu_count=16)
    # a given --torch_compile also leaves the compile mode (CUDA graphs) to the user
    assert set(left) == set(CUDA_DEFAULTS) - {"torch_compile", "torch_compile_mode", "unpad_tokens"}
    workers_given = device_speed_defaults("cuda", {"dataloader_num_workers"}, cpu_count=16)
    assert "dataloader_persistent_workers" not in workers_given  # --dataloader_num_workers 0 must stay valid
    two_cores = device_speed_defaults("cuda", set(), cpu_count=2)
    assert (two_cores["dataloader_num_workers"], two_cores["dataloader_persistent_workers"]) == (1, True)
    one_core = device_speed_defaults("cuda", set(), cpu_count=1)
    assert (one_core["dataloader_num_workers"], one_core["dataloader_persistent_workers"]) == (0, False)
    with pytest.raises(ValueError, match="cpu_count has value 0; allowed: an integer >= 1"):
        device_speed_defaults("cuda", set(), cpu_count=0)


def test_speed_defaults_applied_to_the_arguments_that_have_them(tmp_path):
    args = PretrainingArguments()
    training_args = TrainingArguments(output_dir=str(tmp_path), report_to="none", use_cpu=True)
    assert apply_speed_defaults((args,), training_args, set()) == {}  # the run's own device: the CPU
    assert (training_args.torch_compile, args.unpad_tokens, args.fixed_prediction_rows) == (False, True, False)
    chosen = apply_speed_defaults((args,), training_args, {"dataloader_num_workers"}, device_type="cuda")
    assert "dataloader_num_workers" not in chosen and training_args.dataloader_num_workers == 0
    assert training_args.dataloader_persistent_workers is False
    assert training_args.torch_compile is True and training_args.torch_compile_backend == "inductor"
    assert training_args.torch_compile_mode == "reduce-overhead"
    assert training_args.accelerator_config.non_blocking is True  # the AcceleratorConfig Trainer reads
    assert training_args.logging_nan_inf_filter is False
    assert (args.unpad_tokens, args.fixed_prediction_rows) == (False, True)


def test_options_given_by_value_and_on_the_command_line(tmp_path):
    training_args = TrainingArguments(output_dir=str(tmp_path), report_to="none", dataloader_num_workers=0, seed=3)
    given = options_given_by_value(PretrainingArguments(unpad_tokens=False), training_args)
    assert {"unpad_tokens", "seed", "output_dir"} <= given
    assert not {"dataloader_num_workers", "optim", "torch_compile", "bf16"} & given  # defaults, given or not
    argv = ["--train_files", "x.txt", "--bf16", "false", "--torch_compile", "false"]
    assert {"bf16", "torch_compile", "train_files"} == given_options(pretraining_parser(), argv)


# ---------------------------------------------------------------------------------------------------------------
# A fixed number of decoded positions
# ---------------------------------------------------------------------------------------------------------------
def test_prediction_rows_cover_the_masked_count():
    # 4,096 positions at 15%: mean 614.4, sd 22.85; 614.4 + 6 sd = 751.5 -> 752 (a multiple of 8)
    assert prediction_rows(32 * 128, 0.15) == 752
    assert prediction_rows(10, 0.5) == 10  # never more than the positions
    assert prediction_rows(32 * 512, 0.3) % 8 == 0
    with pytest.raises(ValueError, match="--mlm_probability has value 1.5; allowed: a number > 0 and < 1"):
        prediction_rows(100, 1.5)
    with pytest.raises(ValueError, match="positions has value 0"):
        prediction_rows(0, 0.15)


def test_prediction_positions_labelled_first_then_slack():
    labels = torch.tensor([[-100, 7, -100, -100], [5, -100, -100, 9]])
    assert prediction_positions(labels, 5).tolist() == [1, 4, 7, 0, 2]  # labelled in row-major order, then slack
    assert prediction_positions(labels, 3).tolist() == [1, 4, 7]
    assert prediction_positions(labels, 2).tolist() == [1, 4, 7, 0, 2, 3, 5, 6]  # overflow: every position


def masked_batch(seed: int = 0, rate: float = 0.15) -> dict:
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, TINY["vocab_size"], (3, 17), generator=generator)
    labels = torch.full_like(ids, -100)
    chosen = torch.rand(ids.shape, generator=generator) < rate
    chosen[0, 1] = True
    labels[chosen] = ids[chosen]
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}


@pytest.mark.parametrize("rows", [24, 51, 2], ids=["slack", "every-position", "overflow"])
def test_fixed_rows_loss_is_todays_mean_over_the_masked_positions(rows):
    """Today's sparse loss (the masked rows by boolean indexing, mean cross-entropy) against the fixed-size gather:
    the same terms with the slack's -100 ignored; fp32, the mean of ≤ 51 terms summed in another order and the
    head's matmul over another row count: |Δloss| ≤ 1e-6 · loss. The logits of the masked rows: within the row-count
    tolerance (`assert_equal_but_row_count`)."""
    torch.manual_seed(0)
    model = FfnBertForMaskedLM(tiny_config(sparse_prediction=True)).eval()
    batch = masked_batch()
    selected = batch["labels"] != -100
    masked = int(selected.sum())
    assert 2 < masked < 24  # the three cases: slack, all positions, more masked than rows (then all positions)
    today = model(**batch)
    positions = prediction_positions(batch["labels"], rows)
    fixed = model(**batch, prediction_positions=positions)
    assert fixed.logits.shape == (rows if masked <= rows else 51, TINY["vocab_size"])
    assert fixed.loss.item() == pytest.approx(today.loss.item(), rel=1e-6)
    assert_equal_but_row_count(fixed.logits[:masked], today.logits, "logits of the masked positions")
    # negative control: positions that leave a masked one out give another loss
    dropped = model(**batch, prediction_positions=positions[1:])
    assert abs(dropped.loss.item() - today.loss.item()) > 1e-4


def test_collator_adds_fixed_positions_to_training_batches_only(tokenizer):
    collator = FixedOrRandomMaskCollator(tokenizer, 0.15, fixed_prediction_rows=True)
    torch.manual_seed(0)
    features = [{"input_ids": [tokenizer.cls_token_id] + [7] * 62 + [tokenizer.sep_token_id]} for _ in range(4)]
    batch = collator(features)
    positions = batch["prediction_positions"]
    assert positions.shape == (prediction_rows(4 * 64, 0.15),)
    labels = batch["labels"].flatten()
    masked = int((labels != -100).sum())
    assert (labels[positions[:masked]] != -100).all() and (labels[positions[masked:]] == -100).all()
    evaluation = collator([{**f, "labels": [-100] * 64} for f in features])  # fixed maskings: passed through
    assert "prediction_positions" not in evaluation
    assert "prediction_positions" not in FixedOrRandomMaskCollator(tokenizer, 0.15)(features)


# ---------------------------------------------------------------------------------------------------------------
# Nothing read back from the device per step
# ---------------------------------------------------------------------------------------------------------------
READ_BACKS = {
    torch.Tensor.item,
    torch.Tensor.tolist,
    torch.Tensor.__bool__,
    torch.Tensor.__int__,
    torch.Tensor.__float__,
    torch.Tensor.__index__,
    torch.Tensor.nonzero,
    torch.nonzero,
    torch.masked_select,
    torch.Tensor.masked_select,
}


class NoReadBack(TorchFunctionMode):
    """Fails on what makes the host wait for a CUDA device: reading a value back (`item`, `bool`, `int`, ...) or an
    output whose shape depends on the values (`nonzero`, boolean-mask indexing). On the CPU the code runs the same
    calls, so this shows where a CUDA run would synchronise."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        boolean_index = func is torch.Tensor.__getitem__ and any(
            isinstance(index, torch.Tensor) and index.dtype == torch.bool
            for index in (args[1] if isinstance(args[1], tuple) else (args[1],))
        )
        if func in READ_BACKS or boolean_index:
            raise AssertionError(f"read back from the device: {getattr(func, '__name__', func)}")
        return func(*args, **kwargs)


def test_counting_and_decoding_do_not_read_back():
    torch.manual_seed(0)
    model = FfnBertForMaskedLM(tiny_config(sparse_prediction=True)).train()
    batch = masked_batch()
    positions = prediction_positions(batch["labels"], 24)
    outputs = model.bert(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], return_dict=True)

    class Encoder(torch.nn.Module):  # the encoder's output as computed: only the head's path runs in the mode
        def forward(self, **kwargs):
            return outputs

    model.bert = Encoder()
    with NoReadBack():
        loss = model(**batch, prediction_positions=positions).loss
    assert loss.item() > 0
    with pytest.raises(AssertionError, match="read back from the device"), NoReadBack():
        model(**batch)  # negative control: today's boolean indexing reads the masked count back

    callback = ThroughputCallback(None, sparse_prediction=True, pad_token_id=0)
    with NoReadBack():
        for _ in range(3):
            callback.count(model, (), batch)
    assert isinstance(callback.tokens, torch.Tensor)  # kept on the batch's device until a log line reads it
    assert (int(callback.tokens), int(callback.decoded)) == (3 * 51, 3 * int((batch["labels"] != -100).sum()))


# ---------------------------------------------------------------------------------------------------------------
# fp32 one flag away
# ---------------------------------------------------------------------------------------------------------------
def test_explicit_bf16_false_means_fp32(tmp_path, monkeypatch):
    plain = TrainingArguments(output_dir=str(tmp_path), report_to="none")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # after the arguments chose their device
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    assert use_bf16_where_available(plain, given={"bf16"}) is False and plain.mixed_precision == "no"
    assert use_bf16_where_available(plain, given=set()) is True  # the default: bf16 where supported
