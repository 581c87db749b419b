"""Unpadded execution (`unpad_tokens=True`): at every real token equal to upstream BERT and to the switch off,
zeros at pad positions, exact fallbacks, gradient checkpointing, training, LoRA, torch.compile.

Equal means within fp32 rounding (`assert_close_to_scale`, tests/test_packed.py says why): packed, the linear
layers get n_real rows instead of batch·seq and attention sums a sequence's own keys instead of its padded row's,
so whether the bits agree depends on the CPU's BLAS kernels (on the tiny models they did on the Intel Xeon of the
first sessions). `torch.equal` where the ops are the same: the fallbacks (the padded path), the pads' zeros and
dropout's draws; and upstream BERT with the switch off (tests/test_parity.py).
"""

from __future__ import annotations

import pytest
import torch
from datasets import Dataset
from peft import LoraConfig, get_peft_model
from torch import nn
from transformers import (
    AutoTokenizer,
    BertConfig,
    BertForMaskedLM,
    BertForMultipleChoice,
    BertForNextSentencePrediction,
    BertForPreTraining,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertModel,
    Trainer,
    TrainingArguments,
)
from transformers.utils import logging as hf_logging

from hf_ffn import (
    FfnBertConfig,
    FfnBertForMaskedLM,
    FfnBertForMultipleChoice,
    FfnBertForNextSentencePrediction,
    FfnBertForPreTraining,
    FfnBertForQuestionAnswering,
    FfnBertForSequenceClassification,
    FfnBertForTokenClassification,
    FfnBertModel,
)
from hf_ffn.unpadding import TokenPacking

from .conftest import SCALE_TOL, TINY, assert_close_to_scale, tiny_batch, tiny_config

ATTN = ["eager", "sdpa"]
NO_DROPOUT = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
HEADS = [
    (FfnBertModel, BertModel),
    (FfnBertForPreTraining, BertForPreTraining),
    (FfnBertForMaskedLM, BertForMaskedLM),
    (FfnBertForNextSentencePrediction, BertForNextSentencePrediction),
    (FfnBertForSequenceClassification, BertForSequenceClassification),
    (FfnBertForMultipleChoice, BertForMultipleChoice),
    (FfnBertForTokenClassification, BertForTokenClassification),
    (FfnBertForQuestionAnswering, BertForQuestionAnswering),
]
VARIANTS = [
    {"ffn_type": "geglu"},
    {"ffn_type": "swiglu", "ffn_bias": False},
    {"layer_norm_position": "pre"},
    {"layer_norm_position": ["pre", "post"], "ffn_type": ["gelu", "swiglu"], "embedding_layer_norm": False},
]
SENTENCES = [
    "a gripping, beautifully acted film.",
    "dull.",
    "the plot is thin, the jokes are stale, and the two leads seem to be acting in different movies entirely.",
    "worth the ticket",
    "an unexpectedly moving portrait of a family that never quite manages to say what it means",
    "meh",
]


@pytest.fixture(autouse=True)
def quiet_transformers():
    hf_logging.set_verbosity_error()
    yield
    hf_logging.set_verbosity_warning()


def real_mask(batch: dict) -> torch.Tensor:
    """The real-token positions (batch, seq) as bools, for inputs of shape (batch, seq) or (batch, choices, seq)."""
    return batch["attention_mask"].reshape(-1, batch["attention_mask"].shape[-1]).bool()


def assert_close_at_real_tokens(expected, actual, mask: torch.Tensor) -> None:
    """Every tensor of two model outputs within the fp32 rounding of the packed path (`assert_close_to_scale`,
    tests/test_packed.py says why): at real tokens for per-token tensors (leading dims equal to the mask's,
    batch × seq), everywhere for the others (pooler, sequence-level logits, losses)."""
    assert expected.keys() == actual.keys()
    for key in expected.keys():
        values = (
            zip(expected[key], actual[key], strict=True)
            if isinstance(expected[key], tuple)
            else [(expected[key], actual[key])]
        )
        for a, b in values:
            per_token = a.dim() >= 2 and a.shape[:2] == mask.shape
            a, b = (a[mask], b[mask]) if per_token else (a, b)
            assert_close_to_scale(b, a, key)


def head_inputs(ours_class: type, batch: dict) -> dict:
    """`batch` (tiny_batch) with labels for the head; for multiple choice its 3 rows become the 3 choices of one
    example (1, 3, seq). Token-level labels are -100 at pad positions, as the data collators set them."""
    batch = dict(batch)
    token_labels = (batch["input_ids"] % 3).masked_fill(batch["attention_mask"] == 0, -100)
    if ours_class is FfnBertForMultipleChoice:
        return {key: value[None] for key, value in batch.items()} | {"labels": torch.tensor([1])}
    labels = {
        FfnBertForPreTraining: {"labels": token_labels, "next_sentence_label": torch.tensor([0, 1, 1])},
        FfnBertForMaskedLM: {"labels": token_labels},
        FfnBertForNextSentencePrediction: {"labels": torch.tensor([0, 1, 1])},
        FfnBertForSequenceClassification: {"labels": torch.tensor([0, 2, 1])},
        FfnBertForTokenClassification: {"labels": token_labels},
        FfnBertForQuestionAnswering: {
            "start_positions": torch.tensor([1, 0, 1]),
            "end_positions": torch.tensor([5, 3, 1]),
        },
    }
    return batch | labels.get(ours_class, {})


def unpadded_copy(upstream: nn.Module, ours_class: type, attn: str, **overrides) -> nn.Module:
    """An FfnBert model with `upstream`'s weights (loaded through the BERT key mapping) and the switch on."""
    config = FfnBertConfig(**{**upstream.config.to_dict(), **overrides, "unpad_tokens": True})
    ours = ours_class(config)
    ours.load_state_dict(upstream.state_dict())
    ours.set_attn_implementation(attn)
    return ours.eval()


# ---------------------------------------------------------------------------------------------------------------
# TokenPacking and the config field
# ---------------------------------------------------------------------------------------------------------------
def test_token_padding_finds_real_tokens_and_round_trips():
    mask = tiny_batch()["attention_mask"]  # lengths 7, 4, 2 of 7
    padding = TokenPacking.from_attention_mask(mask)
    assert padding.num_real == 13 and (padding.batch_size, padding.seq_len) == (3, 7)
    # packed order: sequences by length (2, 4, 7), each in order
    assert padding.indices.tolist() == [*range(14, 16), *range(7, 11), *range(0, 7)]
    assert padding.buckets == ((2, 1), (4, 1), (7, 1)) and padding.first_tokens.tolist() == [0, 7, 14]
    assert padding.cu_seqlens.tolist() == [0, 2, 6, 13]
    x = torch.randn(3, 7, 5)
    packed = padding.unpad(x)
    assert torch.equal(packed, x.reshape(21, 5)[padding.indices])
    repadded = padding.pad(packed)
    assert torch.equal(repadded[mask.bool()], x[mask.bool()])
    assert torch.equal(repadded[~mask.bool()], torch.zeros(8, 5))
    holes = torch.tensor([[1, 0, 1, 1], [1, 1, 0, 0]], dtype=torch.bool)  # holes after token 0 are fine
    assert TokenPacking.from_attention_mask(holes).indices.tolist() == [4, 5, 0, 2, 3]


@pytest.mark.parametrize(
    "mask",
    [
        None,
        torch.ones(3, 7, dtype=torch.long),  # no padding
        torch.tensor([[0, 1, 1], [1, 1, 1]]),  # left padding: the pooler's token 0 is a pad
        torch.tensor([[1, 1, 0], [0, 0, 0]]),  # a row without real tokens
        torch.tensor([[1.0, 0.5, 0.0]]),  # not 0/1
        torch.zeros(2, 1, 3, 3),  # a prepared 4-D mask
    ],
    ids=["none", "all-ones", "left-padding", "empty-row", "soft", "4d"],
)
def test_token_padding_is_none_for_other_masks(mask):
    assert TokenPacking.from_attention_mask(mask) is None


def test_unpad_tokens_field(tiny_bert_checkpoint, tmp_path):
    assert FfnBertConfig().unpad_tokens is False
    with pytest.raises(ValueError, match=r"unpad_tokens must be True or False, got 1"):
        FfnBertConfig(unpad_tokens=1)
    model = FfnBertModel.from_pretrained(tiny_bert_checkpoint, unpad_tokens=True)
    assert model.config.unpad_tokens is True
    model.save_pretrained(tmp_path)
    assert FfnBertModel.from_pretrained(tmp_path).config.unpad_tokens is True
    # an execution switch: the same weights under the same names, so the state dicts are identical
    off = FfnBertModel.from_pretrained(tiny_bert_checkpoint)
    assert all(torch.equal(a, b) for a, b in zip(off.state_dict().values(), model.state_dict().values(), strict=True))
    assert list(off.state_dict()) == list(model.state_dict())


# ---------------------------------------------------------------------------------------------------------------
# Exactness: every head against upstream BERT; the variants against themselves with the switch off
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("attn", ATTN)
@pytest.mark.parametrize("ours_class, upstream_class", HEADS, ids=[h[1].__name__ for h in HEADS])
def test_every_head_equals_upstream_at_real_tokens(ours_class, upstream_class, attn):
    torch.manual_seed(0)
    num_labels = 2 if upstream_class is BertForQuestionAnswering else 3  # QA: start and end logits
    upstream = upstream_class(BertConfig(**TINY, num_labels=num_labels)).eval()
    upstream.set_attn_implementation(attn)
    ours = unpadded_copy(upstream, ours_class, attn)
    batch = head_inputs(ours_class, tiny_batch())
    with torch.no_grad():
        expected = dict(upstream(**batch, output_hidden_states=True))
        actual = dict(ours(**batch, output_hidden_states=True))
    mask = real_mask(batch)
    if ours_class is FfnBertForQuestionAnswering:
        # Upstream's span loss is a softmax over every position, pads included, so it reads the pad logits: those
        # of the pad tokens' hidden states upstream, of zeros here. The one output that differs.
        assert not torch.equal(expected.pop("loss"), actual.pop("loss"))
    assert_close_at_real_tokens(expected, actual, mask)
    if ours_class is FfnBertModel:  # pad positions are zeros in every hidden state
        assert all(torch.equal(h[~mask], torch.zeros_like(h[~mask])) for h in actual["hidden_states"])
    if ours_class is FfnBertForTokenClassification:  # the head applied to zeros at pad positions
        assert torch.equal(actual["logits"][~mask], ours.classifier.bias.expand(int((~mask).sum()), -1))


@pytest.mark.parametrize("attn", ATTN)
@pytest.mark.parametrize("variant", VARIANTS, ids=["geglu", "swiglu-nobias", "pre", "mixed"])
def test_variants_equal_themselves_with_the_switch_off(variant, attn):
    torch.manual_seed(0)
    model = FfnBertForPreTraining(tiny_config(**variant)).eval()
    model.set_attn_implementation(attn)
    batch = head_inputs(FfnBertForPreTraining, tiny_batch(seed=1))
    with torch.no_grad():
        expected = model(**batch, output_hidden_states=True)
        model.config.unpad_tokens = True
        actual = model(**batch, output_hidden_states=True)
        last = model.bert(**tiny_batch(seed=1)).last_hidden_state
    mask = real_mask(batch)
    assert_close_at_real_tokens(expected, actual, mask)
    assert len(actual.hidden_states) == TINY["num_hidden_layers"] + 1
    assert torch.equal(last[~mask], torch.zeros_like(last[~mask]))  # also after Pre-LN's final norm


def tokenized(checkpoint: str) -> dict:
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    return dict(tokenizer(SENTENCES, padding=True, return_tensors="pt"))


@pytest.mark.parametrize("attn", ATTN)
def test_real_checkpoint_equals_upstream(bundled_checkpoint, attn):
    upstream = BertModel.from_pretrained(bundled_checkpoint, attn_implementation=attn).eval()
    ours = FfnBertModel.from_pretrained(bundled_checkpoint, attn_implementation=attn, unpad_tokens=True).eval()
    batch = tokenized(bundled_checkpoint)
    assert (batch["attention_mask"] == 0).float().mean() > 0.3
    with torch.no_grad():
        expected, actual = upstream(**batch, output_hidden_states=True), ours(**batch, output_hidden_states=True)
    # sequences longer than the tiny models': packed attention within fp32 rounding (measured: last hidden state
    # 4.2e-6 at values up to 6.0, pooler 2.2e-7)
    assert_close_at_real_tokens(expected, actual, real_mask(batch))


@pytest.mark.parametrize("variant", [{"ffn_type": "swiglu"}, {"layer_norm_position": "pre"}], ids=["swiglu", "pre"])
def test_real_checkpoint_variants_equal_switch_off(bundled_checkpoint, variant):
    torch.manual_seed(0)  # the new weights (gate_proj, final_norm) are initialised
    model = FfnBertModel.from_pretrained(bundled_checkpoint, attn_implementation="sdpa", **variant).eval()
    batch = tokenized(bundled_checkpoint)
    with torch.no_grad():
        expected = model(**batch, output_hidden_states=True)
        model.config.unpad_tokens = True
        actual = model(**batch, output_hidden_states=True)
    assert_close_at_real_tokens(expected, actual, real_mask(batch))


@pytest.fixture(scope="module")
def bert_base_pair(bert_base_checkpoint):
    upstream = BertForPreTraining.from_pretrained(bert_base_checkpoint).eval()
    ours = FfnBertForPreTraining.from_pretrained(bert_base_checkpoint, unpad_tokens=True).eval()
    return upstream, ours


@pytest.mark.parametrize("attn", ATTN)
def test_bert_base_shapes_equal_upstream(bert_base_pair, bundled_checkpoint, attn):
    upstream, ours = bert_base_pair
    upstream.set_attn_implementation(attn)
    ours.set_attn_implementation(attn)
    batch = tokenized(bundled_checkpoint)  # the same uncased WordPiece vocabulary as bert-base
    with torch.no_grad():
        assert_close_at_real_tokens(upstream(**batch), ours(**batch), real_mask(batch))


# ---------------------------------------------------------------------------------------------------------------
# Fallbacks: the padded path, exactly (pad positions included)
# ---------------------------------------------------------------------------------------------------------------
def four_d_mask(mask: torch.Tensor) -> torch.Tensor:
    """An additive (batch, 1, seq, seq) mask blocking the pad keys, as a user could prepare it."""
    blocked = (mask == 0)[:, None, None, :].expand(-1, 1, mask.shape[1], -1)
    return torch.zeros(blocked.shape).masked_fill(blocked, torch.finfo(torch.float32).min)


@pytest.mark.parametrize("case", ["no-mask", "all-ones", "left-padding", "4d-mask", "output-attentions"])
def test_fallback_is_the_padded_path_exactly(case):
    torch.manual_seed(0)
    model = FfnBertModel(tiny_config()).eval()
    model.set_attn_implementation("eager")
    batch, kwargs = tiny_batch(), {"output_hidden_states": True}
    if case == "no-mask":
        del batch["attention_mask"]
    elif case == "all-ones":
        batch["attention_mask"] = torch.ones_like(batch["attention_mask"])
    elif case == "left-padding":
        batch = {key: value.flip(1) for key, value in batch.items()}
    elif case == "4d-mask":
        batch["attention_mask"] = four_d_mask(batch["attention_mask"])
    else:
        kwargs["output_attentions"] = True
    with torch.no_grad():
        expected = model(**batch, **kwargs)
        model.config.unpad_tokens = True
        actual = model(**batch, **kwargs)
    for key in expected.keys():
        values = expected[key] if isinstance(expected[key], tuple) else (expected[key],)
        actuals = actual[key] if isinstance(actual[key], tuple) else (actual[key],)
        assert all(torch.equal(a, b) for a, b in zip(values, actuals, strict=True)), key


# ---------------------------------------------------------------------------------------------------------------
# Training: losses, gradients, gradient checkpointing, Trainer, LoRA, torch.compile
# ---------------------------------------------------------------------------------------------------------------
# Weight gradients sum over the token rows: over batch·seq rows (pads contribute exact zeros) with the switch off,
# over n_real rows with it on. The same terms, summed in another order by the kernels: fp32 reassociation. Measured
# here: most gradients equal, the FFN biases off by ≤ 6e-11 (gradients up to 1.2). Bound: docs/unpadded.md's, 1e-5
# of each gradient's largest value (`assert_close_to_scale`), at least 1e-6 (the key biases' gradients are 0 in
# exact arithmetic: softmax ignores a shift), as in tests/test_packed.py.
GRAD_FLOOR = 1e-6


def loss_and_grads(model: nn.Module, batch: dict) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad()
    loss = model(**batch).loss
    loss.backward()
    return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("checkpointing", [None, False, True], ids=["plain", "checkpointing", "reentrant"])
@pytest.mark.parametrize("model_class", [FfnBertForSequenceClassification, FfnBertForMaskedLM])
@pytest.mark.parametrize("variant", [{}, {"ffn_type": "swiglu", "layer_norm_position": "pre"}], ids=["bert", "pre"])
def test_training_loss_equal_and_gradients_within_tolerance(model_class, variant, checkpointing):
    torch.manual_seed(0)
    model = model_class(tiny_config(num_labels=3, **NO_DROPOUT, **variant)).train()
    batch = head_inputs(model_class, tiny_batch())
    loss_off, grads_off = loss_and_grads(model, batch)
    model.config.unpad_tokens = True
    if checkpointing is not None:
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": checkpointing})
        if checkpointing:
            model.enable_input_require_grads()  # reentrant checkpointing needs an input that requires grad
    loss_on, grads_on = loss_and_grads(model, batch)
    assert_close_to_scale(loss_on, loss_off, "loss")  # the loss reads real tokens only (labels are -100 at pads)
    assert grads_on.keys() == grads_off.keys() and len(grads_off) > 0
    for name in grads_off:
        assert_close_to_scale(grads_on[name], grads_off[name], name, floor=GRAD_FLOOR)


def test_dropout_in_train_mode_still_random_and_pads_zero():
    torch.manual_seed(0)
    model = FfnBertModel(tiny_config(unpad_tokens=True)).train()
    batch = tiny_batch()
    first, second = model(**batch).last_hidden_state, model(**batch).last_hidden_state
    mask = real_mask(batch)
    assert not torch.equal(first[mask], second[mask])
    assert torch.equal(first[~mask], torch.zeros_like(first[~mask]))


def padded_dataset(n: int = 24, seed: int = 0):
    """Rows of 3..9 tokens padded to 9, label 1 iff the first token after [CLS] is below 50."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 99, (n, 9), generator=g)
    ids[:, 0] = 2
    lengths = torch.randint(3, 10, (n,), generator=g)
    mask = (torch.arange(9)[None] < lengths[:, None]).long()
    return Dataset.from_dict(
        {
            "input_ids": (ids * mask).tolist(),
            "attention_mask": mask.tolist(),
            "labels": (ids[:, 1] < 50).long().tolist(),
        }
    )


def test_trainer_run_ends_with_the_same_weights_within_tolerance(tmp_path):
    torch.manual_seed(0)
    initial = FfnBertForSequenceClassification(tiny_config(num_labels=2, **NO_DROPOUT)).state_dict()

    def train(unpad: bool) -> tuple[nn.Module, list[float]]:
        model = FfnBertForSequenceClassification(tiny_config(num_labels=2, unpad_tokens=unpad, **NO_DROPOUT))
        model.load_state_dict(initial)
        args = TrainingArguments(
            output_dir=str(tmp_path / str(unpad)),
            per_device_train_batch_size=8,
            learning_rate=0.5,
            max_steps=6,
            optim="sgd",
            save_strategy="no",
            report_to="none",
            disable_tqdm=True,
            logging_steps=1,
            seed=0,
            use_cpu=True,
        )
        trainer = Trainer(model=model, args=args, train_dataset=padded_dataset())
        trainer.train()
        return model, [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]

    off, losses_off = train(False)
    on, losses_on = train(True)
    assert len(losses_on) == 6
    # Step 1 within the packed path's rounding (the same weights); later steps start from weights that differ by the
    # learning rate times the gradient differences (bounded above). SGD keeps that proportionality; Adam divides by
    # sqrt(v) and turns the rounding noise of gradients that are 0 in exact arithmetic (the key biases') into
    # full-size steps, so a weight tolerance would not hold.
    assert losses_on == pytest.approx(losses_off, rel=1e-5)
    # Each SGD step moves the two runs' weights apart by at most lr × the gradients' rounding (SCALE_TOL of
    # gradients up to about 1): over 6 steps 6 · 0.5 · 1e-5 = 3e-5.
    bound = 6 * 0.5 * SCALE_TOL
    moved = 0.0
    for (name, a), b in zip(off.named_parameters(), on.parameters(), strict=True):
        assert (a - b).abs().max().item() <= bound, name
        moved = max(moved, (a - initial[name]).abs().max().item())
    assert moved > 100 * bound  # the run trained: weights moved 0.06 (measured), ≤ 7.5e-9 apart


def test_lora_on_attention_names_unchanged():
    torch.manual_seed(0)
    base = FfnBertForSequenceClassification(tiny_config(num_labels=3, **NO_DROPOUT))
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["query", "value"], task_type="SEQ_CLS"))
    for name, p in model.named_parameters():
        if "lora_B" in name:  # B starts at 0; a random B makes the adapter change the output
            nn.init.normal_(p, std=0.5)
    batch = head_inputs(FfnBertForSequenceClassification, tiny_batch())
    model.train()
    loss_off, grads_off = loss_and_grads(model, batch)
    base.config.unpad_tokens = True
    loss_on, grads_on = loss_and_grads(model, batch)
    assert_close_to_scale(loss_on, loss_off, "loss")
    assert any("attention.self.query.lora_A" in name for name in grads_on)
    assert any("attention.self.value.lora_B" in name for name in grads_on)
    for name in grads_off:
        assert_close_to_scale(grads_on[name], grads_off[name], name, floor=GRAD_FLOOR)


def test_torch_compile_dynamic_matches_eager():
    torch.manual_seed(0)
    # one layer and dynamo's own backend keep tracing short; the data-dependent parts (mask check, nonzero) are
    # the model's, not the layers'
    model = FfnBertModel(tiny_config(unpad_tokens=True, num_hidden_layers=1)).eval()
    compiled = torch.compile(model, backend="eager", dynamic=True)
    with torch.no_grad():
        for seed in (0, 1):
            batch = tiny_batch(seed=seed)
            batch = batch if seed == 0 else {key: value[:, :5] for key, value in batch.items()}  # another shape
            assert torch.equal(compiled(**batch).last_hidden_state, model(**batch).last_hidden_state)
