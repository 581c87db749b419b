"""Post-LN vs Pre-LN on a small masked-language model: gradient norms at initialisation and a short training run.

Used by `studies/switches/grad_norms.py` and `studies/switches/mlm_ln_demo.py`. The data is plain text (one file per
document, e.g. the State of the Union addresses in `../shared/data/state_union`), read, cut into blocks and masked by
the library's own helpers (`hf_ffn.training.readers.read_text_documents`, `mlm_blocks`, and `masking_collator`
through `mask_once`); the tokenizer is BERT's WordPiece pipeline trained on that text
(`hf_ffn.mlm.tokenizer.train_tokenizer`), so nothing is downloaded and the vocabulary stays small enough for CPU runs.
Training is the library's MLM path (`hf_ffn.mlm.trainer.mlm_trainer`: transformers' `Trainer` and
`DataCollatorForLanguageModeling`, 15% masking, BERT's 80/10/10 rule).

Xiong et al. 2020 ("On Layer Normalization in the Transformer Architecture", arXiv 2002.04745, sec. 3 and fig. 3)
show that at initialisation the gradient of the FFN's second weight W^{2,l} (here `mlp.down_proj.weight`) grows
with the layer index l in a Post-LN Transformer and stays flat in a Pre-LN one; hence Post-LN's need for a
learning-rate warm-up.
"""

from __future__ import annotations

import argparse
import math
import tempfile
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase, TrainingArguments, set_seed

from hf_ffn.configuration_ffn_bert import FfnBertConfig
from hf_ffn.mlm.tokenizer import train_tokenizer
from hf_ffn.mlm.trainer import mlm_trainer
from hf_ffn.modeling_ffn_bert import FfnBertForMaskedLM
from hf_ffn.training.blocks import masking_collator
from hf_ffn.training.readers import read_text_documents


def study_parser(description: str, figure: str, **defaults: int) -> argparse.ArgumentParser:
    """The options both studies take: the text (`--data`, `--pattern`), where `figure` goes, the model's size
    (`--hidden-size`, `--heads`; FFN 4 × hidden), the blocks (`--seq-len`, `--batch-size`), the tokenizer's
    `--vocab-size`, `--seed` and `--threads`. `defaults` sets each script's own sizes (keys: the option's dest)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--data", required=True, help="folder of *.txt documents (e.g. ../shared/data/state_union)")
    parser.add_argument(
        "--pattern",
        default="[0-9]*.txt",
        help="which files of --data are documents (default: the State of the Union speeches)",
    )
    parser.add_argument(
        "--output-dir",
        type=Path,
        default=Path("out"),
        help=f"where {figure} goes (default: out; studies/switches/figures for the published figure)",
    )
    for option in ("hidden-size", "heads", "seq-len", "batch-size", "vocab-size"):
        parser.add_argument(f"--{option}", type=int, default=defaults[option.replace("-", "_")])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--threads", type=int, help="torch CPU threads (default: torch's; 1 is fastest on a busy machine)"
    )
    return parser


def parse_study(parser: argparse.ArgumentParser) -> tuple[argparse.Namespace, list[str]]:
    """Parse the command line, set `--threads`, and read the documents of `--data` (their texts, in file order)."""
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    return args, [text for _, text in read_text_documents([args.data], args.pattern, argument="--data")]


def mlm_config(vocab_size: int, layer_norm_position: str, **sizes: Any) -> FfnBertConfig:
    """A small FfnBert MLM config; `sizes` override the BERT fields (hidden_size, num_hidden_layers, ...)."""
    return FfnBertConfig(vocab_size=vocab_size, layer_norm_position=layer_norm_position, **sizes)


def mask_once(
    blocks,
    tokenizer: PreTrainedTokenizerBase,
    mlm_probability: float,
    seed: int,
    mask_replace_prob: float = 0.8,
    random_replace_prob: float = 0.1,
) -> dict[str, torch.Tensor]:
    """`blocks` (rows of `mlm_blocks`) masked once, in one call, by `hf_ffn.training.masking_collator` with its own
    generator seeded by `seed` (BERT's rule: `mlm_probability` of the non-special tokens chosen, `mask_replace_prob`
    of them → [MASK], `random_replace_prob` → a random token, the rest kept): the same seed gives the same masks,
    whatever else used the global RNG. (`hf_ffn.training.fixed_maskings` masks a `Dataset` of any size the same
    way, 1,000 blocks a call.)

    Returns `input_ids`, `attention_mask` and `labels` (-100 where not masked), each (rows, block_size).
    """
    collator = masking_collator(tokenizer, mlm_probability, mask_replace_prob, random_replace_prob, seed)
    return collator(
        [
            {"input_ids": ids, "special_tokens_mask": special}
            for ids, special in zip(blocks["input_ids"], blocks["special_tokens_mask"], strict=True)
        ]
    )


def masked_batches(
    blocks, tokenizer: PreTrainedTokenizerBase, batch_size: int, num_batches: int, seed: int = 0
) -> list[dict[str, torch.Tensor]]:
    """`num_batches` batches of the first `batch_size * num_batches` blocks (rows of
    `hf_ffn.training.blocks.mlm_blocks`), masked once by `mask_once` with `seed` (the same masks for every model
    compared). Each batch: input_ids, attention_mask, labels, each (batch_size, block_size).

    Raises:
        ValueError: if there are fewer than `batch_size * num_batches` blocks.
    """
    needed = batch_size * num_batches
    if len(blocks) < needed:
        raise ValueError(f"only {len(blocks)} blocks of text, need batch_size * num_batches = {needed}")
    masked = mask_once(blocks.select(range(needed)), tokenizer, mlm_probability=0.15, seed=seed)
    return [
        {key: masked[key][i * batch_size : (i + 1) * batch_size] for key in ("input_ids", "attention_mask", "labels")}
        for i in range(num_batches)
    ]


def ffn_gradient_norms(model: FfnBertForMaskedLM, batches: list[dict[str, torch.Tensor]]) -> list[float]:
    """Per layer, the Frobenius norm of ∂(MLM loss)/∂W^{2,l} (`mlp.down_proj.weight`), averaged over `batches`.

    The model is put in eval mode (no dropout), as in Xiong et al. 2020, fig. 3. Returns `num_hidden_layers`
    floats, first layer first.
    """
    model.eval()
    layers = model.bert.encoder.layer
    totals = [0.0] * len(layers)
    for batch in batches:
        model.zero_grad(set_to_none=True)
        model(**batch).loss.backward()
        for i, layer in enumerate(layers):
            totals[i] += layer.mlp.down_proj.weight.grad.norm().item()
    model.zero_grad(set_to_none=True)
    return [total / len(batches) for total in totals]


def xavier_init_(model: FfnBertForMaskedLM) -> FfnBertForMaskedLM:
    """Re-initialise every encoder `nn.Linear` weight with Xavier/Glorot normal (std √(2/(fan_in + fan_out))),
    biases zero, in place; embeddings, LayerNorms and the MLM head keep BERT's initialisation.

    This is the initialisation of Xiong et al. 2020's analysis (sec. 3.2 and appendix); BERT's own, normal with
    std 0.02, is 2-3× smaller at hidden 256 and makes every sublayer's output small beside the residual stream.
    """
    for module in model.bert.encoder.modules():
        if isinstance(module, torch.nn.Linear):
            torch.nn.init.xavier_normal_(module.weight)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
    return model


def train_mlm(
    config: FfnBertConfig,
    tokenizer: PreTrainedTokenizerBase,
    train_blocks,
    eval_blocks,
    *,
    max_steps: int,
    learning_rate: float,
    batch_size: int,
    eval_steps: int,
    seed: int = 0,
) -> dict[str, list[tuple[int, float]]]:
    """Train an `FfnBertForMaskedLM` from scratch on `train_blocks` (rows of `hf_ffn.training.blocks.mlm_blocks`)
    through the library's MLM path, `hf_ffn.mlm.trainer.mlm_trainer`: transformers' `Trainer`, AdamW, constant learning
    rate, no warm-up, training batches masked afresh, `eval_blocks` masked once with `seed`.

    Returns `{"train": [(step, loss), ...], "eval": [(step, loss), ...], "learning_rate": [(step, lr), ...]}`
    from the Trainer's log history (train loss averaged over each logging window of `eval_steps // 5` steps;
    eval loss on the masked `eval_blocks`, step 0 first; the learning rate the scheduler reported).
    Nothing is saved: the Trainer's output folder is a temporary directory.
    """
    set_seed(seed)  # same initial weights and data order for every config compared
    model = FfnBertForMaskedLM(config)
    with tempfile.TemporaryDirectory() as output_dir:
        args = TrainingArguments(
            output_dir=output_dir,
            max_steps=max_steps,
            per_device_train_batch_size=batch_size,
            per_device_eval_batch_size=batch_size,
            learning_rate=learning_rate,
            lr_scheduler_type="constant",
            warmup_steps=0,
            logging_steps=max(1, eval_steps // 5),
            eval_strategy="steps",
            eval_steps=eval_steps,
            save_strategy="no",
            report_to=[],
            seed=seed,
            use_cpu=True,
            disable_tqdm=True,
            dataloader_num_workers=0,
        )
        trainer = mlm_trainer(model, tokenizer, train_blocks, eval_blocks, args, mlm_probability=0.15, seed=seed)
        initial = trainer.evaluate()["eval_loss"]  # step 0; `train()` starts a fresh log history
        trainer.train()
    history = trainer.state.log_history
    return {
        "train": [(h["step"], h["loss"]) for h in history if "loss" in h],
        "eval": [(0, initial)] + [(h["step"], h["eval_loss"]) for h in history if "eval_loss" in h],
        "learning_rate": [(h["step"], h["learning_rate"]) for h in history if "learning_rate" in h],
    }


def uniform_loss(vocab_size: int) -> float:
    """Cross-entropy (nats) of a uniform guess over the vocabulary, ln(vocab_size): about the loss at a start."""
    return math.log(vocab_size)


def unigram_entropy(blocks: Sequence[Sequence[int]], special_ids: set[int]) -> float:
    """Entropy (nats) of the token frequencies in `blocks` (lists of token ids, e.g. `mlm_blocks(...)["input_ids"]`),
    special tokens left out: the MLM loss of a model that ignores the context and always predicts the corpus's
    unigram distribution."""
    counts = Counter(i for block in blocks for i in block if i not in special_ids)
    total = sum(counts.values())
    return -sum(c / total * math.log(c / total) for c in counts.values())


def split_documents(documents: list[str], eval_documents: int) -> tuple[list[str], list[str]]:
    """The last `eval_documents` documents (the latest speeches, by file name) held out for evaluation."""
    if not 0 < eval_documents < len(documents):
        raise ValueError(f"eval_documents must be in 1..{len(documents) - 1}, got {eval_documents!r}")
    return documents[:-eval_documents], documents[-eval_documents:]


__all__ = [
    "ffn_gradient_norms",
    "mask_once",
    "masked_batches",
    "mlm_config",
    "split_documents",
    "train_mlm",
    "train_tokenizer",
    "unigram_entropy",
    "uniform_loss",
    "xavier_init_",
]
