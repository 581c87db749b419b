"""`hf-ffn mlm`: masked-language-model pre-training of an FfnBert variant with transformers' `Trainer`, from scratch
or continued from a checkpoint, as transformers' `run_mlm.py` does; the entry point is `run.pretraining_main`.
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
