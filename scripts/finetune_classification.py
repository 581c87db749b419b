#!/usr/bin/env python
"""Fine-tune a BERT or FfnBert checkpoint for text classification or regression, as any FFN variant
(transformers' `run_glue.py` style: `HfArgumentParser` over model, data and `TrainingArguments` dataclasses;
`Trainer` does the training). The same as `hf-ffn finetune`: both call `hf_ffn.finetune.run.finetune_argv`.

Example (MRPC with its preset: columns, metric and BERT's GLUE recipe, from the bundled all-MiniLM-L6-v2):

    python scripts/finetune_classification.py \
        --model_name_or_path "$(python -c 'from hf_ffn.parity import bundled_checkpoint as b; print(b())')" \
        --ffn_type geglu --task mrpc --data_dir ../shared/data/mrpc --output_dir out/mrpc-geglu

It ends with one line, e.g. `task=mrpc score=75.12 (f1_binary=0.8210, accuracy=0.6814) on validation;
baseline=75.50 (majority class)`: the task score is the mean of the task's metrics ×100 (GLUE's rule), the baseline
the same score of always answering the validation split's majority class. Without `--output_dir` the run saves to a
new folder under out/finetune/ and says where. The preset's recipe (learning rate 2e-5, batch 32,
3 epochs, 10% warm-up) fills only the training flags you do not give: `--learning_rate 1e-4` wins.

Other data: `--train_file/--validation_file/--test_file` (csv, tsv, json or jsonl with a `text` or `sentence`
column and a `label` column; `--text_column`/`--text_pair_column`/`--label_column` pick others; real-number labels
make a regression), `--label_dir` (one text file per label, one example per line, split by `--split_sizes`) or
`--dataset_name` (needs hub access). All arguments and their defaults: `--help`. The output folder gets the model,
tokenizer, a model card (README.md) with the measured results and all_results.json.
"""

from __future__ import annotations

import sys

from hf_ffn.finetune.run import finetune_argv
from hf_ffn.training.arguments import bad_input_exits


def main(argv: list[str] | None = None) -> dict:
    """Parse `argv` (default: `sys.argv[1:]`; or one `.json` file of arguments), train, print the summary line;
    return the outcome (`hf_ffn.finetune.run.finetune_argv`)."""
    return finetune_argv(sys.argv[1:] if argv is None else argv, prog="finetune_classification.py")


if __name__ == "__main__":
    with bad_input_exits("finetune_classification.py"):  # a one-line message naming the flag, not a traceback
        main()
