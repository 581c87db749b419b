"""The plateau exit as a measured outcome (issue 42, item 2; its definition: README.md, "The plateau exit").

At every evaluation (every `PROBE_TOKENS` training tokens, at the start and at the end) a unit's `PlateauProbe`
scores the held-out blocks of each source apart (`SOURCES`: Wikipedia, books; `PROBE_TOKENS_PER_SOURCE` tokens of
each, in blocks spread evenly over the source's held-out blocks, masked once with the split seed) against the
source's own [MASK]-position unigram floor (the training blocks' unigram, `hf_ffn.mlm.floors`), and measures
where the attention looks on `PROBE_ATTENTION_BLOCKS` of them (`attention_locality`, as `diagnostics.py
attention`: per layer the mean weight on the previous, next and same token against the uniform 1/n). Each
evaluation joins the log history as one entry `{"step", "plateau_probe": {...}}`, so checkpoints and the finished
folder keep it; `plateau_curve` reads them back and `plateau_exit_tokens` finds the exit: the first evaluation whose
mean over the sources of (floor − [MASK] loss) is ≥ `PLATEAU_EXIT_NATS`.

`StopAt` ends training at a unit's `stop_step` or at a wall-clock deadline (then the log history gets
`{"step", "cut_by_time_limit": true}`), saving a checkpoint there; the run then evaluates and saves as at its end.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np
import torch
from transformers import TrainerCallback

from hf_ffn.mlm.floors import mlm_floors, never_chosen_ids
from hf_ffn.mlm.metrics import mlm_scores
from hf_ffn.mlm.trainer import StopAtStep
from hf_ffn.modeling_ffn_bert import FfnBertForMaskedLM
from hf_ffn.training.blocks import documents_to_blocks, fixed_maskings
from hf_ffn.training.corpus import held_out_split, load_corpus, load_documents
from studies.pretraining.settings import (
    PLATEAU_EXIT_NATS,
    PROBE_ATTENTION_BLOCKS,
    PROBE_TOKENS,
    PROBE_TOKENS_PER_SOURCE,
    SOURCES,
    SPLIT_SEED,
)

PROBE_KEY, CUT_KEY = "plateau_probe", "cut_by_time_limit"
PROBE_BATCH_TOKENS = 8192  # tokens a forward pass of the probe (its logits: 8,192 × the vocabulary)


def source_of(part: str | Path) -> str:
    """A corpus part's source: its file name's start (wiki-00.txt.xz → "wiki").

    Raises:
        ValueError: a part of no known source, naming it and `SOURCES`.
    """
    source = Path(part).name.split("-")[0]
    if source not in SOURCES:
        raise ValueError(f"corpus part {Path(part).name!r} is of no known source; allowed: {', '.join(SOURCES)}-NN")
    return source


def held_out_sources(corpus: dict) -> list[str]:
    """The source of each held-out document of `load_corpus(**corpus)`, in its order: the documents are those of
    the files in order, so each file's count (read alone, the same way) gives each document's file, and
    `held_out_split` on the indices gives the held-out ones."""
    counts = [len(load_documents([Path(f)], cache_dir=corpus["cache_dir"])) for f in corpus["train_files"]]  # 1 process
    owners = [source_of(f) for f, count in zip(corpus["train_files"], counts, strict=True) for _ in range(count)]
    _, held_out = held_out_split(list(range(len(owners))), corpus["validation_split_percentage"], corpus["split_seed"])
    return [owners[i] for i in held_out]


def probe_sets(corpus: dict, tokenizer, block: int, folder: Path) -> tuple[dict, dict]:
    """({source: held-out blocks masked once}, {source: description}) for the plateau probe of blocks of `block`
    tokens, built once into `folder` (`datasets`' `save_to_disk` and `probe.json`) and loaded from it after.
    Each description: held-out documents, blocks, blocks probed, [MASK] positions and the unigram floor on them."""
    from datasets import load_from_disk

    if (folder / "probe.json").is_file():
        info = json.loads((folder / "probe.json").read_text())
        return {source: load_from_disk(str(folder / source)) for source in info}, info
    documents = load_corpus(**corpus)
    sources = held_out_sources(corpus)
    if len(sources) != len(documents["validation"]):
        raise RuntimeError(f"{len(sources)} held-out sources for {len(documents['validation'])} held-out documents")
    train = documents_to_blocks(documents["train"], tokenizer, block, num_proc=corpus.get("num_proc"))
    sets, info = {}, {}
    for source in SOURCES:
        own = [i for i, s in enumerate(sources) if s == source]
        if not own:
            continue
        blocks = documents_to_blocks(documents["validation"].select(own), tokenizer, block)
        chosen = np.unique(
            np.linspace(0, len(blocks) - 1, min(len(blocks), max(1, PROBE_TOKENS_PER_SOURCE // block)))
            .round()
            .astype(int)
        )
        masked = fixed_maskings(blocks.select(chosen), tokenizer, 1, SPLIT_SEED)
        floors = mlm_floors(train, masked, len(tokenizer), tokenizer.mask_token_id, never_chosen_ids(tokenizer))
        masked.save_to_disk(str(folder / source))
        sets[source] = masked
        labels, shown = np.asarray(masked["labels"]), np.asarray(masked["input_ids"])
        info[source] = {
            "documents": len(own),
            "blocks": len(blocks),
            "blocks_probed": len(chosen),
            "mask_positions": int(((labels >= 0) & (shown == tokenizer.mask_token_id)).sum()),
            "unigram_mask": floors["unigram_mask"],
        }
    (folder / "probe.json").write_text(json.dumps(info, indent=1) + "\n")
    return sets, info


def attention_locality(model, input_ids: torch.Tensor) -> list[dict]:
    """Per layer on the blocks `input_ids` (unmasked): mean attention entropy (nats), log n, and the mean weight on
    the previous, next and same token, beside the uniform 1/n. `model`: an `FfnBertForMaskedLM` (its attention
    switched to eager for the call, then back) or a run's folder."""
    if not isinstance(model, torch.nn.Module):
        model = FfnBertForMaskedLM.from_pretrained(model, attn_implementation="eager").eval()
    implementation = model.config._attn_implementation
    if implementation != "eager":
        model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            attentions = model(input_ids=input_ids.to(model.device), output_attentions=True).attentions
    finally:
        if implementation != "eager":
            model.set_attn_implementation(implementation)
    n = input_ids.shape[1]
    index = torch.arange(n, device=attentions[0].device)
    rows = []
    for layer, weights in enumerate(attentions):  # (batch, heads, query, key)
        entropy = -(weights * weights.clamp_min(1e-30).log()).sum(-1).mean().item()
        rows.append(
            {
                "layer": layer,
                "entropy": entropy,
                "uniform_entropy": math.log(n),
                "previous": weights[..., index[1:], index[:-1]].mean().item(),
                "next": weights[..., index[:-1], index[1:]].mean().item(),
                "same": weights[..., index, index].mean().item(),
                "uniform": 1 / n,
            }
        )
    return rows


def score_sources(model, sets: dict, info: dict, mask_token_id: int, batch_size: int) -> dict:
    """{source: {"mask_loss", "mask_accuracy", "unigram_mask", "below_unigram_floor"}, "below_unigram_floor": the
    mean over the sources}: `model` (in eval mode, under no_grad) on each source's probe set of `probe_sets`
    (`sets`, `info`), `batch_size` blocks a forward pass."""
    entry, belows = {}, []
    for source, masked in sets.items():
        rows = masked.select_columns(["input_ids", "labels"]).with_format("numpy")
        losses, predictions, labels, shown = [], [], [], []
        for batch in rows.iter(batch_size):
            ids = torch.as_tensor(np.asarray(batch["input_ids"]), dtype=torch.long, device=model.device)
            gold = torch.as_tensor(np.asarray(batch["labels"]), dtype=torch.long, device=model.device)
            logits = model(input_ids=ids).logits.float()
            loss = torch.nn.functional.cross_entropy(logits.transpose(1, 2), gold.clamp_min(0), reduction="none")
            losses.append(loss.cpu().numpy())
            predictions.append(logits.argmax(-1).cpu().numpy())
            labels.append(gold.cpu().numpy())
            shown.append(ids.cpu().numpy())
        scores = mlm_scores(*map(np.concatenate, (losses, predictions, labels, shown)), mask_token_id)
        floor = info[source]["unigram_mask"]
        entry[source] = {
            "mask_loss": scores["mask_loss"],
            "mask_accuracy": scores["mask_accuracy"],
            "unigram_mask": floor,
            "below_unigram_floor": floor - scores["mask_loss"],
        }
        belows.append(floor - scores["mask_loss"])
    entry["below_unigram_floor"] = float(np.mean(belows))
    return entry


class PlateauProbe(TrainerCallback):
    """Scores the probe sets and the attention's locality at the start (a resumed run: where it resumes, unless its
    log history has that step at the same block length), every `every` steps and at the end; each evaluation joins
    `state.log_history` as `{"step", PROBE_KEY: {...}}`."""

    def __init__(self, sets: dict, info: dict, mask_token_id: int, tokens_per_step: int):
        self.sets, self.info, self.mask, self.tokens_per_step = sets, info, mask_token_id, tokens_per_step
        self.every = probe_every(tokens_per_step)
        self.block = len(next(iter(sets.values()))[0]["input_ids"])
        self.batch_size = max(1, PROBE_BATCH_TOKENS // self.block)

    def probe(self, model, state) -> None:
        done = ((e["step"], e[PROBE_KEY].get("block", self.block)) for e in state.log_history if PROBE_KEY in e)
        if (state.global_step, self.block) in set(done):
            return
        training = model.training
        model.eval()
        with torch.no_grad():
            entry = score_sources(model, self.sets, self.info, self.mask, self.batch_size)
            first = next(iter(self.sets.values())).select_columns(["input_ids", "labels"]).with_format("numpy")
            first = first[:PROBE_ATTENTION_BLOCKS]  # {column: array}
            unmasked = np.where(first["labels"] >= 0, first["labels"], first["input_ids"])
            layers = attention_locality(model, torch.as_tensor(unmasked, dtype=torch.long))
        model.train(training)
        entry["tokens"] = state.global_step * self.tokens_per_step
        entry["block"] = self.block  # tokens a probed block (a sequence-length warm-up changes it mid-run)
        entry["attention"] = [[r["previous"], r["next"], r["same"], r["entropy"]] for r in layers]
        entry["attention_uniform"] = layers[0]["uniform"]
        entry["neighbour_weight_vs_uniform"] = max(max(r["previous"], r["next"]) for r in layers) / layers[0]["uniform"]
        state.log_history.append({"step": state.global_step, PROBE_KEY: entry})

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.probe(model, state)  # a resumed run too: its checkpoint's weights at this run's block length

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if state.global_step % self.every == 0:
            self.probe(model, state)

    def on_train_end(self, args, state, control, model=None, **kwargs):
        self.probe(model, state)


class StopAt(StopAtStep):
    """Ends training at step `step` (None: the schedule's end) with a checkpoint a later unit may continue from
    (`run.continue_earlier`; the library's `StopAtStep`), or once `time.time()` passes `deadline` (None: no limit),
    marking the latter in the log history (`CUT_KEY`)."""

    def __init__(self, step: int | None = None, deadline: float | None = None):
        super().__init__(step)
        self.deadline = deadline

    def on_step_end(self, args, state, control, **kwargs):
        if self.step is not None:
            super().on_step_end(args, state, control, **kwargs)
        if not control.should_training_stop and self.deadline is not None and time.time() >= self.deadline:
            control.should_training_stop = control.should_save = True
            state.log_history.append({"step": state.global_step, CUT_KEY: True})


def probe_every(tokens_per_step: int) -> int:
    """Steps between two evaluations of the probe: `PROBE_TOKENS` of training tokens, at least one step."""
    return max(1, round(PROBE_TOKENS / tokens_per_step))


def plateau_curve(log_history: list[dict]) -> list[dict]:
    """The probe's evaluations of a run's log history, in step order: `{"step", **entry}`."""
    return sorted(({"step": e["step"], **e[PROBE_KEY]} for e in log_history if PROBE_KEY in e), key=lambda e: e["step"])


def plateau_exit_tokens(curve: list[dict]) -> int | None:
    """The training tokens at the plateau exit: those of the first evaluation of `curve` with
    `below_unigram_floor` ≥ `PLATEAU_EXIT_NATS` (README.md's definition); None if no evaluation is."""
    return next((e["tokens"] for e in curve if e["below_unigram_floor"] >= PLATEAU_EXIT_NATS), None)
