#!/usr/bin/env python
"""Fine-tune a BERT or FfnBert checkpoint for text classification, as any FFN variant (transformers' `run_glue.py`
style: `HfArgumentParser` over model, data and `TrainingArguments` dataclasses; `Trainer` does the training).

Example (rt_polarity, GeGLU converted function-preservingly from the bundled all-MiniLM-L6-v2):

    python scripts/finetune_classification.py \
        --model_name_or_path "$(python -c 'from hf_ffn.parity import bundled_checkpoint as b; print(b())')" \
        --ffn_type geglu --ffn_init preserving \
        --rt_polarity_dir ../shared/data/rt_polarity --max_seq_length 64 \
        --do_train --per_device_train_batch_size 32 --num_train_epochs 1 --learning_rate 5e-5 \
        --eval_strategy steps --eval_steps 50 --output_dir out/rt-geglu

Other data: `--train_file/--validation_file/--test_file` (csv, json or jsonl with a `text` or `sentence` column and
a `label` column; `--text_column`/`--label_column` pick others) or `--dataset_name` (needs hub access).
All arguments: `--help`. The output folder gets the model, tokenizer, a model card (README.md) with the measured
results and all_results.json; see `hf_ffn.training` for how an interrupted run is kept from looking finished.
"""

from __future__ import annotations

import json
import sys

from transformers import HfArgumentParser, TrainingArguments

from hf_ffn.training import (
    ClassificationDataArguments, ModelArguments, bad_input_exits, parse_arguments, run_classification,
)


def main(argv: list[str] | None = None) -> dict:
    """Parse `argv` (default: `sys.argv[1:]`; or one `.json` file of arguments), train, return the outcome."""
    parser = HfArgumentParser((ModelArguments, ClassificationDataArguments, TrainingArguments))
    model_args, data_args, training_args = parse_arguments(parser, sys.argv[1:] if argv is None else argv)
    outcome = run_classification(model_args, data_args, training_args)
    print(json.dumps(outcome["results"], indent=2))
    print(f"saved to {training_args.output_dir}")
    return outcome


if __name__ == "__main__":
    with bad_input_exits("finetune_classification.py"):  # a one-line message naming the flag, not a traceback
        main()
