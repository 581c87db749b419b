#!/usr/bin/env python
"""Masked-language-model training of a BERT or FfnBert checkpoint on plain text, as any FFN variant, to adapt a
converted variant before fine-tuning (transformers' `run_mlm.py` style). Prints perplexity before and after, on
held-out documents masked once with a fixed seed.

Example (State of the Union speeches, SwiGLU converted from the bundled all-MiniLM-L6-v2):

    python scripts/finetune_mlm.py \
        --model_name_or_path "$(python -c 'from hf_ffn.parity import bundled_checkpoint as b; print(b())')" \
        --ffn_type swiglu --ffn_init preserving \
        --train_files ../shared/data/state_union --max_seq_length 128 \
        --per_device_train_batch_size 16 --max_steps 100 --learning_rate 1e-4 --output_dir out/mlm-swiglu

`--train_files` takes text, json or parquet files (compressed text too) and folders (their `--file_pattern`,
`*.txt` by default); documents are separated by empty lines (`--document_boundary`); whole documents are held out
for validation (`--validation_split_percentage`, default 10, or `--validation_files`). All arguments: `--help`.
The run is `run_pretraining` with a checkpoint; `hf-ffn mlm` (`hf_ffn.mlm.run.pretraining_main`) is the same
run and also pre-trains from scratch.
"""

from __future__ import annotations

import json
import sys

from transformers import HfArgumentParser, TrainingArguments

from hf_ffn.mlm.arguments import PretrainingDataArguments
from hf_ffn.mlm.run import run_mlm
from hf_ffn.training.arguments import ModelArguments, bad_input_exits, parse_arguments


def main(argv: list[str] | None = None) -> dict:
    """Parse `argv` (default: `sys.argv[1:]`; or one `.json` file of arguments), train, return the outcome."""
    parser = HfArgumentParser((ModelArguments, PretrainingDataArguments, TrainingArguments))
    model_args, data_args, training_args = parse_arguments(parser, sys.argv[1:] if argv is None else argv)
    outcome = run_mlm(model_args, data_args, training_args)
    results = outcome["results"]
    print(json.dumps(results, indent=2))
    before = f"{results['before_perplexity']:.2f}" if "before_perplexity" in results else "(resumed run)"
    print(f"perplexity before {before} -> after {results['eval_perplexity']:.2f}")
    print(f"saved to {training_args.output_dir}")
    return outcome


if __name__ == "__main__":
    with bad_input_exits("finetune_mlm.py"):  # a one-line message naming the flag, not a traceback
        main()
