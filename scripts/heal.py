#!/usr/bin/env python
"""Heal a converted FfnBert by distillation from its source checkpoint: a thin wrapper over `hf-ffn heal`
(`hf_ffn.healing.run_healing`; arguments: `HealArguments` and transformers' `TrainingArguments`), e.g.

    hf-ffn convert "$BERT" out/swiglu --ffn_type swiglu
    python scripts/heal.py --student out/swiglu --train_files ../shared/data/state_union \\
        --eval_data ../shared/data/rt_polarity --output_dir out/heal-swiglu \\
        --max_steps 200 --per_device_train_batch_size 32 --learning_rate 1e-4 --warmup_steps 20 --save_steps 50

Runs under torchrun / accelerate launch like the fine-tuning scripts
(`torchrun --nproc_per_node 2 scripts/heal.py ...`). The healed model is written to OUTPUT_DIR/healed
(`--healed_dir` to choose), Trainer's checkpoints to OUTPUT_DIR (`--resume_from_checkpoint last` resumes).
"""

import sys

from hf_ffn.cli import main

if __name__ == "__main__":
    sys.exit(main(["heal", *sys.argv[1:]]))
