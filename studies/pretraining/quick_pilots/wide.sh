#!/bin/bash
# A 1,000-step run on the study's corpus, tokenizer and held-out documents (run from the repository root after the
# pilot has cached them), the first 2,000 held-out blocks: $1 name, rest: options that override these (W0-W2).
mkdir -p out/pilot/quick
D=../shared/data/pretraining
HF_HUB_OFFLINE=1 OMP_NUM_THREADS=2 python -m hf_ffn.cli mlm \
  --train_files $D/wiki-00.txt.xz $D/wiki-01.txt.xz $D/wiki-02.txt.xz $D/wiki-03.txt.xz $D/books-00.txt.xz $D/books-01.txt.xz $D/books-02.txt.xz $D/books-03.txt.xz \
  --validation_split_percentage 1 --split_seed 42 --cache_dir out/pretraining/cache --tokenizer_name studies/pretraining/tokenizer \
  --hidden_size 256 --num_hidden_layers 4 --num_attention_heads 4 --intermediate_size 1024 --max_seq_length 128 \
  --per_device_train_batch_size 32 --per_device_eval_batch_size 128 --eval_strategy steps --eval_steps 250 --logging_steps 50 \
  --save_strategy no --report_to none --max_eval_samples 2000 --layer_norm_position pre --max_grad_norm 0.5 --adam_beta2 0.98 \
  --adam_epsilon 1e-6 --weight_decay 0.01 --learning_rate 4e-3 --warmup_steps 300 --max_steps 1000 --seed_modules_by_name \
  --config_overrides hidden_dropout_prob=0.0,attention_probs_dropout_prob=0.0,initializer_range=0.05 \
  --output_dir out/pilot/quick/$1 "${@:2}" > out/pilot/quick/$1.log 2>&1
