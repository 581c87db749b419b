"""What a pre-training run reports: `run_info.json` (`run_report`), its FFN beside the standard FFN (`ffn_report`),
the one printed line (`summary_line`) and the model card's notes (`card_notes`)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from transformers.utils import logging as hf_logging

from ..configuration_ffn_bert import FfnBertConfig
from ..params import config_row

logger = hf_logging.get_logger(__name__)


def ffn_report(config: FfnBertConfig, standard_width: int | None = None) -> dict:
    """The FFN of `config` counted (`hf_ffn.params.config_row`, FLOPs over all layers added); with `standard_width`
    the standard FFN (`config.hidden_act`) at that width under `"standard"`, and the ratio of FFN parameters."""
    row = asdict(config_row(config, "this model"))
    row.pop("model")
    row["ffn_flops_per_token_all_layers"] = row["ffn_flops_per_token"] * config.num_hidden_layers
    standard = {"ffn_type": config.hidden_act, "intermediate_size": standard_width}
    if standard_width is not None and (config.ffn_types[0], config.intermediate_size) != tuple(standard.values()):
        reference = config_row(type(config).from_dict({**config.to_dict(), **standard}), "standard")
        row["standard"] = {key: value for key, value in asdict(reference).items() if key != "model"}
        row["ffn_params_vs_standard"] = row["ffn_params_all_layers"] / reference.ffn_params_all_layers
    return row


def run_report(
    args, data_args, training_args, trainer, built, data, train_seconds: float, resumed_from_step: int
) -> dict:
    """`run_info.json`'s model, FFN, conversion, documents, blocks, steps, tokens, epochs (above 1 logged), execution
    switches and `train_seconds` (`run_pretraining` adds the rest)."""
    model, state, block = trainer.model, trainer.state, data_args.max_seq_length
    train, evaluation, documents = data.train, data.evaluation, data.documents
    per_step = training_args.per_device_train_batch_size * training_args.world_size
    sequences = state.global_step * per_step * training_args.gradient_accumulation_steps
    sizes = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
    sizes += ("hidden_act", "ffn_type", "layer_norm_position")
    new_head = built["head_note"] or args.model_name_or_path is None
    streamed = data_args.streaming  # a stream's length is not known
    epochs = None if streamed else sequences / len(train)
    if epochs is not None and epochs > 1:
        logger.warning(f"the run saw its training blocks {epochs:.3g} times (epochs > 1): training text repeated")
    return {
        "model": {
            "from": args.model_name_or_path or "scratch",
            "sizes": {key: getattr(model.config, key) for key in sizes},
            "parameters": model.num_parameters(),  # the MLM model, tied decoder counted once
        },
        "mlm_head": "newly initialised" if new_head else "from the checkpoint",
        "ffn": ffn_report(model.config, built["standard_width"]),
        "conversion": built["conversion"],
        "documents": {split: "streamed" if streamed else len(docs) for split, docs in documents.items()},
        "blocks": {
            "train": "streamed" if streamed else len(train),
            "validation": len(evaluation) // data_args.eval_maskings,
            "validation_maskings": data_args.eval_maskings,
            "tokens_per_block": block,
            "attention_scope": data_args.attention_scope,
        },
        "steps": state.global_step,
        "resumed_from_step": resumed_from_step,  # train_seconds covers the steps after it
        "tokens_seen": sequences * block,
        "epochs": epochs,
        "sparse_prediction": args.sparse_prediction,  # how the run executed (neither is saved in config.json)
        "unpad_tokens": args.unpad_tokens,
        "train_seconds": train_seconds,
    }


def summary_line(report: dict, config: FfnBertConfig, standard_width: int | None, loss: float, results: dict) -> str:
    """The run's one printed line: the FFN, its parameters and FLOPs, the held-out loss, steps, tokens, epochs."""
    ffn = report["ffn"]
    matched = ""
    if "ffn_params_vs_standard" in ffn:
        matched = f"({ffn['ffn_params_vs_standard']:.3f}x the standard FFN at {standard_width}) "
    return (
        f"{report['model']['from']}: {ffn['ffn_type']} FFN width {ffn['intermediate_size']}, "
        f"{config.layer_norm_position}-LN, {ffn['ffn_params_all_layers']:,} FFN parameters {matched}"
        f"and {ffn['ffn_flops_per_token_all_layers']:,} FFN FLOPs per token over {config.num_hidden_layers} "
        f"layers; held-out loss {loss:.4f} (perplexity {results['eval_perplexity']:.2f}), on [MASK] "
        f"positions {results['eval_mask_loss']:.4f} vs unigram floor {report['floors']['unigram_mask']:.4f} "
        f"(accuracy {results['eval_mask_accuracy']:.3f}), over all scored positions {results['eval_token_loss']:.4f} "
        f"vs copy-aware context-free floor {report['floors']['copy_aware']:.4f}, after "
        f"{report['steps']} steps, {report['tokens_seen']:,} tokens"
        + (f" ({report['epochs']:.3g} epochs)" if report["epochs"] is not None else " (streamed)")
        + (f", stopped there: {_stopped(report)}" if _stopped(report) else "")
        + (
            f", {results['train_tokens_per_second']:,.0f} tokens/s ({results['train_gflops_per_second']:.3g} GFLOP/s)"
            if "train_gflops_per_second" in results
            else ""
        )
        + (f"\n{report['plateau']['message']}" if report.get("plateau") and not report["plateau"]["learned"] else "")
    )


def _stopped(report: dict) -> str:
    """The words for a run that stopped at its --stop_at_step, else ""."""
    stop = report.get("stop_at_step")
    return (
        f"--stop_at_step {stop['step']} of a --max_steps {stop['max_steps']} schedule"
        if stop and stop["reached"]
        else ""
    )


def card_notes(report: dict) -> list[str]:
    """The model card's lines on the schedule: blocks, a warm-up or the checkpoint resumed from, an early stop."""
    blocks = report["blocks"]["tokens_per_block"]
    notes = [f"pre-trained on blocks of {blocks} tokens, {report['tokens_seen']:,} tokens in {report['steps']} steps"]
    warm = report.get("short_blocks")
    if warm:
        notes.append(
            f"sequence-length warm-up: steps 1-{warm['short_block_steps']} on blocks of {warm['short_block_length']} "
            f"tokens ({warm['batch_size']} a batch, as many tokens a step; that phase's run is in "
            f"`{Path(warm['output_dir']).name}/`), then blocks of {blocks}, under one learning-rate schedule"
        )
    elif report.get("resumed_from"):  # a warm-up's second phase resumes from its first: said above
        notes.append(f"resumed from `{report['resumed_from']}` at step {report['resumed_from_step']}")
    if _stopped(report):
        notes.append(f"stopped after step {report['steps']}: {_stopped(report)} (the learning rate not decayed to 0)")
    return notes
