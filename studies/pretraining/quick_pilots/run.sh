#!/bin/bash
# A quick pilot on the slice (slice.py first), from the repository root: $1 name, rest: extra hf-ffn mlm options.
# Log: out/pilot/quick/$name.log (the [MASK] loss every 100 steps on 600 held-out blocks, and the floor).
name=$1; shift
mkdir -p out/pilot/quick
HF_HUB_OFFLINE=1 OMP_NUM_THREADS=2 ${MLM:-python -m hf_ffn.cli} mlm \
  --train_files out/pilot/data/train --validation_files out/pilot/data/heldout --cache_dir out/pilot/quick_cache \
  --tokenizer_name out/pilot/tokenizer --hidden_size 128 --num_hidden_layers 4 --num_attention_heads 2 \
  --intermediate_size 512 --max_seq_length 128 --per_device_train_batch_size 32 --per_device_eval_batch_size 128 \
  --eval_strategy steps --eval_steps 100 --logging_steps 50 --save_strategy no --report_to none \
  --max_eval_samples 600 --layer_norm_position pre --max_grad_norm 0.5 --adam_beta2 0.98 --adam_epsilon 1e-6 \
  --weight_decay 0.01 --output_dir out/pilot/quick/$name "$@" > out/pilot/quick/$name.log 2>&1
