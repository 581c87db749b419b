"""The parity job (`hf-ffn parity`): a checkpoint of a supported family (BERT; RoBERTa, XLM-RoBERTa, CamemBERT,
RoBERTa-PreLayerNorm; ELECTRA) loaded into its own upstream transformers classes and into hf_ffn's, compared output by
output with `torch.equal` (`run_parity`); `variant_report` shows what a non-default BERT variant changes."""

from __future__ import annotations

import os
import tempfile
from dataclasses import asdict

import torch
from torch import nn
from transformers import BertModel

from ..checkpoint_names import is_variant_key
from ..checkpoints import (
    check_checkpoint,
    conversion_source,
    group_layer_keys,
    load_pretrained,
    weights_bert_ignores,
)
from ..configuration_ffn_bert import FfnBertConfig
from ..families import Family, checkpoint_family
from ..logging_utils import quiet_transformers
from ..modeling_ffn_bert import HEAD_CLASSES, FfnBertModel
from ..modeling_ffn_roberta import saved_model_type
from .batches import TIME_FLIES_IDS, UPSTREAM_MASKS_PACKED_SEQUENCES, example_batch, flattened_batch, head_inputs
from .compare import ParityRow, compare_outputs, compare_tensors, tensor_difference

# The heads compared on a padding-free batch (`flattened_batch`), by Auto class. Sequence-level outputs differ by
# design there (hf_ffn pools each sequence, upstream each row), so those outputs and heads are left out.
FLATTENED_AUTO_CLASSES = frozenset(
    {"AutoModel", "AutoModelForPreTraining", "AutoModelForMaskedLM"}
    | {"AutoModelForTokenClassification", "AutoModelForQuestionAnswering"}
)
FLATTENED_HEADS: tuple[type, ...] = tuple(h.bert for h in HEAD_CLASSES if h.auto_class in FLATTENED_AUTO_CLASSES)
PER_SEQUENCE_OUTPUTS = frozenset({"pooler_output", "seq_relationship_logits"})
FLATTENED = " (flattened)"  # the suffix of a flattened-batch row's output name


class NotPlainBertError(ValueError):
    """The checkpoint is an hf_ffn variant its upstream class cannot represent (`hf-ffn parity` exits 3); `reasons`:
    its config's `non_default_fields()`, `ignored_weights`: what upstream would drop (`weights_bert_ignores`)."""

    def __init__(self, checkpoint: str, config: FfnBertConfig, upstream: str = "BertModel"):
        self.checkpoint = checkpoint
        self.reasons = config.non_default_fields()
        self.ignored_weights = weights_bert_ignores(config)
        name = "BERT" if upstream == "BertModel" else upstream.removesuffix("Model")  # the family, as it says it
        ignored = (
            f"loading it into {upstream} would ignore {len(self.ignored_weights)} weights "
            f"({', '.join(group_layer_keys(self.ignored_weights))}) and run {name}'s own FFN and LayerNorm placement"
            if self.ignored_weights
            else f"{upstream} would run {name}'s own FFN and LayerNorm placement on these weights"
        )
        source = conversion_source(checkpoint) or f"{name.upper()}_CHECKPOINT"
        variant = f"--ffn_type {','.join(dict.fromkeys(config.ffn_types))}"
        if config.layer_norm_positions != ["post"] * config.num_hidden_layers:
            variant += f" --layer_norm_position {config.layer_norm_positions[0]}"
        export = " (`hf-ffn convert FOLDER OUT --to_bert` exports those)" if name == "BERT" else ""
        super().__init__(
            f"{checkpoint} is not a plain-{name} checkpoint: {'; '.join(self.reasons)}. Upstream {upstream} cannot "
            f"represent it: {ignored}, so comparing outputs with {name} would only measure the variant. To see what "
            f"the variant changes relative to its {name} source, run `hf-ffn parity --model_name_or_path {source} "
            f"{variant}` (a report). Only default-config {'FfnBert' if name == 'BERT' else 'hf_ffn'} folders are "
            f"plain {name}{export}."
        )


def ffn_outputs(model: nn.Module, inputs: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    """Each layer's FFN output (batch, seq, hidden_size) in one forward of a BERT (`output.dense`'s output) or
    FfnBert (`mlp`'s) base model."""
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


def head_folders(
    checkpoint: str, root: str | os.PathLike, seed: int = 0, family: Family | None = None
) -> dict[type, str]:
    """The folder each upstream head class of the family loads `checkpoint` from, so that both sides load the same
    weights: a head the checkpoint lacks is created by upstream under `torch.manual_seed(seed)` and saved under
    `root`. Every encoder weight must come from the checkpoint (else both sides would agree on random weights).

    Raises:
        CheckpointNotLoadedError: an encoder weight the checkpoint lacks or names otherwise, or a corrupt file
            (`hf_ffn.checkpoints.load_pretrained`).
    """
    family = family or checkpoint_family(checkpoint)
    folders = {}
    with quiet_transformers():
        for head in family.heads:
            upstream = family.upstream_class(head)
            torch.manual_seed(seed)
            model, info = load_pretrained(upstream, checkpoint)  # a head of another shape: re-initialised
            if info["missing_keys"] or info["mismatched_keys"]:
                folders[upstream] = os.path.join(root, upstream.__name__)
                model.save_pretrained(folders[upstream])
            else:
                folders[upstream] = checkpoint
    return folders


PARITY_DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# The unpadded rows' bars (`unpadded_rows`; docs/unpadded.md, "How close, and why not bitwise"): in float32 this
# fraction of the tensor's largest |value|; in bfloat16/float16 this many eps of it beyond upstream's own error.
UNPADDED_FP32_TOLERANCE = 1e-5
UNPADDED_HALF_ROUNDINGS = 0.5


def parity_device(device: str | torch.device) -> torch.device:
    """`device` as a `torch.device` the job can run on.

    Raises:
        ValueError: not a device torch knows, or one not available here.
    """
    try:
        resolved = torch.device(device)
    except RuntimeError:
        raise ValueError(f"device={device!r} is not one torch knows: use cpu, cuda or cuda:N") from None
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={device!r}: CUDA is not available here (torch.cuda.is_available() is False)")
    if resolved.type == "meta":
        raise ValueError(f"device={device!r} holds no values to compare: use cpu, cuda or cuda:N")
    try:  # any other device this torch build or machine lacks (mps, xpu, ...)
        torch.empty(0, device=resolved)
    except (RuntimeError, AssertionError) as error:
        reason = str(error).splitlines()[0][:100]
        raise ValueError(f"device={device!r} is not available here ({reason})") from None
    return resolved


def parity_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """`dtype` (a name or value of `PARITY_DTYPES`) as a torch dtype.

    Raises:
        ValueError: any other value.
    """
    resolved = PARITY_DTYPES.get(dtype, dtype) if isinstance(dtype, str) else dtype
    if resolved not in PARITY_DTYPES.values():
        raise ValueError(f"dtype={dtype!r} is not allowed: use one of {', '.join(PARITY_DTYPES)}")
    return resolved


def run_parity(
    checkpoint: str,
    attn_implementation: str = "eager",
    seed: int = 0,
    device: str | torch.device = "cpu",
    dtype: str | torch.dtype = "float32",
    **overrides,
) -> list[ParityRow]:
    """Load `checkpoint` (a checkpoint of a supported family, or a default-config hf_ffn one) into each upstream head
    class of its family and the matching hf_ffn class, both on `device` in `dtype` (`PARITY_DTYPES`), and compare
    every output; `attn_implementation` "eager" compares the attention maps too; `seed` seeds the heads the checkpoint
    lacks; `overrides` go to the hf_ffn side's config (negative controls, e.g. `layer_norm_eps=1e-5`).

    Returns rows for every output of every head, `ffn_rows`, with transformers ≥ 5.25
    (`UPSTREAM_MASKS_PACKED_SEQUENCES`) `flattened_rows`, then `unpadded_rows` (each within its tolerance); every other
    row asks for `torch.equal`.

    Raises:
        FileNotFoundError: `checkpoint` looks local and is not a checkpoint folder (`hf_ffn.checkpoints`).
        CheckpointNotLoadedError: an encoder weight the checkpoint lacks or names otherwise, or a corrupt file.
        NotPlainBertError: an hf_ffn checkpoint whose config is not its upstream family's (a variant).
        ValueError: a checkpoint of no supported family; a bad `device` or `dtype`.
    """
    device, dtype = parity_device(device), parity_dtype(dtype)
    check_checkpoint(checkpoint)
    family = checkpoint_family(checkpoint)  # fails early, clearly, on another family
    rows: list[ParityRow] = []
    with quiet_transformers(), tempfile.TemporaryDirectory() as tmp:
        config = family.config_class.from_pretrained(checkpoint)
        # only an hf_ffn folder can be a variant (an upstream one is its family's model: RoBERTa-PreLayerNorm's Pre-LN)
        if saved_model_type(checkpoint) == family.config_class.model_type and not config.is_default_bert:
            raise NotPlainBertError(str(checkpoint), config, family.upstream_class(family.heads[0]).__name__)
        batch = {key: value.to(device) for key, value in example_batch(checkpoint, config).items()}
        want_attentions = attn_implementation == "eager"
        folders = head_folders(checkpoint, tmp, seed, family)
        load = dict(attn_implementation=attn_implementation, dtype=dtype)
        for head in family.heads:
            upstream_class, ffn_class = family.upstream_class(head), head.ffn_bert
            folder = folders[upstream_class]
            reference = upstream_class.from_pretrained(folder, **load).to(device).eval()
            candidate = ffn_class.from_pretrained(folder, warn_reused_weights=False, **load, **overrides).to(device)
            candidate.eval()
            inputs = head_inputs(upstream_class, batch)
            with torch.no_grad():
                ref_out = reference(**inputs, output_hidden_states=True, output_attentions=want_attentions)
                cand_out = candidate(**inputs, output_hidden_states=True, output_attentions=want_attentions)
            rows += compare_outputs(ffn_class.__name__, ref_out, cand_out)
            if head.auto_class == "AutoModel":
                # BERT's and ELECTRA's checkpoints share bert-base-uncased's vocabulary
                time_flies = family.upstream_type in ("bert", "electra")
                rows += ffn_rows(reference, candidate, batch, time_flies=time_flies)
            if UPSTREAM_MASKS_PACKED_SEQUENCES and head.auto_class in FLATTENED_AUTO_CLASSES:
                rows += flattened_rows(reference, candidate, batch, output_attentions=want_attentions)
        base, ffn_base = family.upstream_class(family.heads[0]), family.heads[0].ffn_bert  # AutoModel
        rows += unpadded_rows(folders[base], batch, attn_implementation, device, dtype, base, ffn_base, **overrides)
    return rows


def unpadded_rows(
    checkpoint: str,
    batch: dict[str, torch.Tensor],
    attn_implementation: str = "sdpa",
    device: str | torch.device = "cpu",
    dtype: str | torch.dtype = "float32",
    upstream_class: type = BertModel,
    ffn_class: type = FfnBertModel,
    **overrides,
) -> list[ParityRow]:
    """`ffn_class` with `unpad_tokens=True` against `upstream_class`, both from `checkpoint`, on the padded `batch`,
    compared on the real tokens (`last_hidden_state`, every hidden state, `pooler_output` where there is a pooler).
    Each row carries its tolerance:

    - float32: |unpadded − upstream| ≤ `UNPADDED_FP32_TOLERANCE` · max |upstream|.
    - bfloat16/float16, against upstream in float32: |unpadded − reference| ≤ |upstream in `dtype` − reference| +
      `UNPADDED_HALF_ROUNDINGS` · eps(`dtype`) · max |reference| (no further from float32 than upstream's own run,
      up to half a rounding; without it the bar is a tie either side may win).

    Raises:
        ValueError: as `parity_device` / `parity_dtype`.
    """
    device, dtype = parity_device(device), parity_dtype(dtype)
    real = batch["attention_mask"].bool()
    load = dict(attn_implementation=attn_implementation)

    def outputs(model_class, run_dtype: torch.dtype, **config) -> dict[str, torch.Tensor]:
        model = model_class.from_pretrained(checkpoint, dtype=run_dtype, **load, **config).to(device).eval()
        with torch.no_grad():
            out = model(**batch, output_hidden_states=True)
        tensors = {"last_hidden_state": out.last_hidden_state[real]}
        if getattr(out, "pooler_output", None) is not None:
            tensors["pooler_output"] = out.pooler_output
        tensors |= {f"hidden_states[{i}]": h[real] for i, h in enumerate(out.hidden_states)}
        return {name: t.float() for name, t in tensors.items()}

    with quiet_transformers():
        upstream = outputs(upstream_class, dtype)
        unpadded = outputs(ffn_class, dtype, unpad_tokens=True, warn_reused_weights=False, **overrides)
        reference = upstream if dtype == torch.float32 else outputs(upstream_class, torch.float32)
    rows = []
    for name, want in reference.items():
        scale = want.abs().max().item()
        if dtype == torch.float32:
            tolerance = UNPADDED_FP32_TOLERANCE * scale
        else:
            rounding = UNPADDED_HALF_ROUNDINGS * torch.finfo(dtype).eps * scale
            tolerance = (upstream[name] - want).abs().max().item() + rounding
        diff, equal = (unpadded[name] - want).abs().max().item(), torch.equal(unpadded[name], want)
        rows.append(ParityRow(f"{ffn_class.__name__} (unpad_tokens)", name, list(want.shape), diff, equal, tolerance))
    return rows


def flattened_rows(
    reference: nn.Module, candidate: nn.Module, batch: dict[str, torch.Tensor], output_attentions: bool = False
) -> list[ParityRow]:
    """Parity rows of one head (eval mode) on `batch` as one padding-free row (`flattened_batch`; positions from
    `padding_idx + 1` for RoBERTa's embeddings, as upstream counts them, from 0 for BERT's and ELECTRA's), named
    `... (flattened)`, without `PER_SEQUENCE_OUTPUTS`."""
    embeddings = reference.base_model.embeddings
    # RoBERTa's embeddings count positions from `padding_idx + 1` (they make their own from `input_ids`)
    start = embeddings.padding_idx + 1 if hasattr(embeddings, "create_position_ids_from_input_ids") else 0
    inputs = flattened_batch(batch, position_ids_start=start)
    with torch.no_grad():
        ref_out = reference(**inputs, output_hidden_states=True, output_attentions=output_attentions)
        cand_out = candidate(**inputs, output_hidden_states=True, output_attentions=output_attentions)
    rows = compare_outputs(type(candidate).__name__, ref_out, cand_out)
    return [
        ParityRow(r.head, r.output + FLATTENED, r.shape, r.max_abs_diff, r.equal)
        for r in rows
        if r.output not in PER_SEQUENCE_OUTPUTS
    ]


def ffn_rows(
    reference: nn.Module, candidate: nn.Module, batch: dict[str, torch.Tensor], time_flies: bool = True
) -> list[ParityRow]:
    """`ffn[i]` rows (each layer's FFN output on `batch`), plus with `time_flies` `ffn[0]` on "time flies like an
    arrow" (`TIME_FLIES_IDS`) when the vocabulary is bert-base-uncased's or larger."""
    rows = [
        compare_tensors("FFN", f"ffn[{i}]", ref, cand)
        for i, (ref, cand) in enumerate(zip(ffn_outputs(reference, batch), ffn_outputs(candidate, batch), strict=False))
    ]
    if not time_flies or reference.config.vocab_size <= max(TIME_FLIES_IDS):  # not bert-base-uncased's vocabulary
        return rows
    ids = {"input_ids": torch.tensor([TIME_FLIES_IDS], device=batch["input_ids"].device)}
    rows.append(
        compare_tensors(
            "FFN", 'ffn[0] "time flies like an arrow"', ffn_outputs(reference, ids)[0], ffn_outputs(candidate, ids)[0]
        )
    )
    return rows


def variant_report(checkpoint: str, attn_implementation: str = "eager", **overrides) -> dict:
    """What a variant (config `overrides`) changes relative to the checkpoint: a report, never a failure. A dict of
    the overrides, parameter counts (`bert`: the upstream base model), `new_weights`, `unused_weights`,
    `mismatched_weights`, and the `tensor_difference` of `last_hidden_state` and each hidden state on real tokens.

    Raises:
        FileNotFoundError, CheckpointNotLoadedError: as `run_parity`.
        ValueError: if the checkpoint is not BERT-shaped or an override is invalid.
    """
    check_checkpoint(checkpoint)
    family = checkpoint_family(checkpoint)  # its family: BertModel / FfnBertModel, RobertaModel / FfnRobertaModel, ...
    # Fails early, clearly, on a bad request; no "weights reused" warning: the report lists reused and new weights.
    config = family.config_class.from_pretrained(checkpoint, warn_reused_weights=False, **overrides)
    batch = example_batch(checkpoint, config)
    torch.manual_seed(0)
    upstream, ours = family.upstream_class(family.heads[0]), family.heads[0].ffn_bert
    reference = load_pretrained(upstream, checkpoint, attn_implementation=attn_implementation)[0].eval()
    variant, info = load_pretrained(  # what the variant adds or re-sizes may be new; the rest must load
        ours, checkpoint, may_be_new=is_variant_key, config=config, attn_implementation=attn_implementation
    )
    variant.eval()
    with torch.no_grad():
        ref_out = reference(**batch, output_hidden_states=True)
        var_out = variant(**batch, output_hidden_states=True)
    mask = batch["attention_mask"]
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
        "last_hidden_state": tensor_difference(ref_out.last_hidden_state, var_out.last_hidden_state, mask),
        "hidden_states": [
            tensor_difference(r, v, mask) for r, v in zip(ref_out.hidden_states, var_out.hidden_states, strict=False)
        ],
    }


def format_table(rows: list[ParityRow]) -> str:
    """A fixed-width text table of the rows ("yes"/"NO", or "≤ tolerance"/"NO (> tolerance)")."""
    header = f"{'head':<34} {'output':<34} {'shape':<18} {'max |Δ|':>10}  equal"
    lines = [header, "-" * len(header)]
    for r in rows:
        shape = "×".join(map(str, r.shape))
        verdict = "yes" if r.equal else "NO"
        if r.tolerance is not None and not r.equal:
            verdict = f"≤ {r.tolerance:.3g}" if r.holds else f"NO (> {r.tolerance:.3g})"
        lines.append(f"{r.head:<34} {r.output:<34} {shape:<18} {r.max_abs_diff:>10.3g}  {verdict}")
    return "\n".join(lines)


def parity_document(checkpoint: str, reason: str, settings: dict, rows: list[ParityRow]) -> dict:
    """`hf-ffn parity --json`'s document: the checkpoint and why, `run_parity`'s `settings`, the verdicts (`exact`:
    every bitwise row equal; `unpadded_within_tolerance`) and the rows (with `holds`)."""
    return {
        "checkpoint": checkpoint,
        "reason": reason,
        **settings,
        "exact": all(row.equal for row in rows if row.tolerance is None),
        "unpadded_within_tolerance": all(row.holds for row in rows if row.tolerance is not None),
        "encoder_weights_loaded": True,  # run_parity raises when one did not come from the checkpoint
        "rows": [asdict(row) | {"holds": row.holds} for row in rows],
    }


def format_parity(document: dict, rows: list[ParityRow]) -> str:
    """`hf-ffn parity`'s text report of `parity_document`'s `document`: the settings, `format_table`, the verdicts."""
    family = checkpoint_family(document["checkpoint"])
    upstream = "BERT" if family.upstream_type == "bert" else family.upstream_class(family.heads[0]).__name__
    bitwise = [row for row in rows if row.tolerance is None]
    unpadded = [row for row in rows if row.tolerance is not None]
    verdict = f"EXACT: every output equals upstream {upstream} bit for bit" if document["exact"] else "NOT EXACT"
    lines = [
        f"checkpoint: {document['checkpoint']}\n  ({document['reason']})",
        f"attention: {document['attn_implementation']}, device: {document['device']}, dtype: {document['dtype']}",
        "weights: every encoder weight loaded from the checkpoint (none missing or renamed); head weights it lacks "
        "were seeded once by upstream and loaded by both sides\n",
        format_table(rows),
        f"\n{sum(row.equal for row in bitwise)}/{len(bitwise)} outputs equal (torch.equal). {verdict}",
    ]
    if unpadded:
        within = "OK" if document["unpadded_within_tolerance"] else "NOT WITHIN TOLERANCE"
        lines.append(
            f"{sum(row.holds for row in unpadded)}/{len(unpadded)} unpadded outputs (unpad_tokens=True, real tokens) "
            f"within tolerance. {within}"
        )
    return "\n".join(lines)


def format_variant_report(report: dict) -> str:
    """`hf-ffn parity --ffn_type ...`'s text report of `variant_report`'s `report` (with its `reason`)."""
    counts, diff = report["parameters"], report["last_hidden_state"]
    return "\n".join(
        [
            f"checkpoint: {report['checkpoint']}\n  ({report['reason']})",
            f"variant: {report['config']}",
            f"parameters: BERT {counts['bert']:,}  variant {counts['variant']:,}  "
            f"({counts['variant'] - counts['bert']:+,})",
            "new weights (initialised as BERT does: linears normal(0, initializer_range) with zero bias, "
            f"LayerNorms ones/zeros): {len(report['new_weights'])}",
            *(f"  + {key}" for key in report["new_weights"]),
            f"checkpoint weights not used: {len(report['unused_weights'])}",
            *(f"  - {key}" for key in report["unused_weights"]),
            *(f"  ! shape mismatch, re-initialised: {key}" for key in report["mismatched_weights"]),
            f"last_hidden_state vs BERT (real tokens): max |Δ| {diff['max_abs_diff']:.4g}, "
            f"mean |Δ| {diff['mean_abs_diff']:.4g}",
            *(
                f"  hidden_states[{i}]: max |Δ| {d['max_abs_diff']:.4g}, mean |Δ| {d['mean_abs_diff']:.4g}"
                for i, d in enumerate(report["hidden_states"])
            ),
        ]
    )


__all__ = [
    "FLATTENED",
    "FLATTENED_AUTO_CLASSES",
    "FLATTENED_HEADS",
    "PER_SEQUENCE_OUTPUTS",
    "PARITY_DTYPES",
    "UNPADDED_FP32_TOLERANCE",
    "UNPADDED_HALF_ROUNDINGS",
    "NotPlainBertError",
    "ffn_outputs",
    "ffn_rows",
    "flattened_rows",
    "format_table",
    "head_folders",
    "parity_document",
    "format_parity",
    "format_variant_report",
    "run_parity",
    "parity_device",
    "parity_dtype",
    "unpadded_rows",
    "variant_report",
]
