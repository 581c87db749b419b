"""`hf-ffn mlm`: masked-language-model pre-training of an FfnBert variant with transformers' `Trainer`, from scratch
or continued from a checkpoint, as transformers' `run_mlm.py` does. Read top-down:

- `arguments`: `PretrainingArguments` (the model: from scratch or a checkpoint), `PretrainingDataArguments` (the text),
  `config_overrides` (`--config_overrides`).
- `tokenizer`: `train_tokenizer`, a WordPiece vocabulary trained on the training documents.
- `data`: the run's data path over `hf_ffn.training.corpus` (documents → blocks → fixed maskings, timed phases) and
  `floors`: the context-free floors of its evaluation.
- `warmup`: the sequence-length warm-up's two phases (`--short_block_length`).
- `trainer`: `mlm_trainer` (the one MLM `Trainer`), with `metrics` (loss on [MASK] positions, accuracy),
  `throughput` (tokens/s, GFLOP/s), `early_stopping`, `speed` (per-device speed defaults, sparse prediction's rows)
  and `initialisation` (`--seed_modules_by_name`).
- `report`: `run_info.json` and the summary line.
- `run`: `run_pretraining` / `pretraining_main` (the entry point of `hf-ffn mlm`), `run_mlm`.
"""

from .arguments import PretrainingArguments, PretrainingDataArguments
from .run import pretraining_main, run_mlm, run_pretraining
from .tokenizer import train_tokenizer
from .trainer import mlm_trainer

__all__ = [
    "PretrainingArguments",
    "PretrainingDataArguments",
    "mlm_trainer",
    "pretraining_main",
    "run_mlm",
    "run_pretraining",
    "train_tokenizer",
]
