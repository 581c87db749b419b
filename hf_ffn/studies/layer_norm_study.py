"""Post-LN vs Pre-LN on a small masked-language model: gradient norms at initialisation and a short training run.

Used by `scripts/grad_norms.py` and `scripts/mlm_ln_demo.py`. The data is plain text (one file per document, e.g.
the State of the Union addresses in `../shared/data/state_union`); the tokenizer is BERT's WordPiece pipeline
(`BertTokenizer`) trained on that text with `train_new_from_iterator`, so nothing is downloaded and the vocabulary
stays small enough for CPU runs. Training is transformers' `Trainer`; batches come from its
`DataCollatorForLanguageModeling` (15% masking, BERT's 80/10/10 rule).

Xiong et al. 2020 ("On Layer Normalization in the Transformer Architecture", arXiv 2002.04745, sec. 3 and fig. 3)
show that at initialisation the gradient of the FFN's second weight W^{2,l} (here `mlp.down_proj.weight`) grows
with the layer index l in a Post-LN Transformer and stays flat in a Pre-LN one; hence Post-LN's need for a
learning-rate warm-up.
"""

from __future__ import annotations

import math
from collections import Counter
import tempfile
from pathlib import Path
from typing import Any

import torch
from transformers import BertTokenizer, DataCollatorForLanguageModeling, PreTrainedTokenizerBase

from ..configuration_ffn_bert import FfnBertConfig
from ..modeling_ffn_bert import FfnBertForMaskedLM


def read_documents(text_dir: str | Path, pattern: str = "*.txt") -> list[str]:
    """The files of `text_dir` matching `pattern`, sorted by name, as strings (non-UTF-8 bytes replaced, never an
    error). For `../shared/data/state_union` use `"[0-9]*.txt"`: the speeches (`1945-Truman.txt`, ...) without
    `SOURCE.txt`.

    Raises:
        FileNotFoundError: if no file of `text_dir` matches `pattern`.
    """
    paths = sorted(p for p in Path(text_dir).glob(pattern) if p.is_file())
    if not paths:
        raise FileNotFoundError(f"text_dir {str(text_dir)!r} holds no file matching {pattern!r}")
    # A few State of the Union files are Latin-1; errors="replace" keeps every other byte.
    return [path.read_text(encoding="utf-8", errors="replace") for path in paths]


def train_tokenizer(documents: list[str], vocab_size: int = 4096) -> PreTrainedTokenizerBase:
    """BERT's uncased WordPiece tokenizer, trained from scratch on `documents` (`vocab_size` entries)."""
    return BertTokenizer().train_new_from_iterator(documents, vocab_size=vocab_size)


def mlm_blocks(documents: list[str], tokenizer: PreTrainedTokenizerBase, seq_len: int) -> list[list[int]]:
    """Token ids of all documents concatenated and cut into blocks `[CLS] ... [SEP]` of `seq_len` tokens
    (`run_mlm.py`'s `group_texts`, with the special tokens added per block). The remainder is dropped."""
    ids = [i for doc in documents for i in tokenizer(doc, add_special_tokens=False)["input_ids"]]
    body = seq_len - 2
    return [
        [tokenizer.cls_token_id, *ids[start : start + body], tokenizer.sep_token_id]
        for start in range(0, len(ids) - body + 1, body)
    ]


def mlm_config(vocab_size: int, layer_norm_position: str, **sizes: Any) -> FfnBertConfig:
    """A small FfnBert MLM config; `sizes` override the BERT fields (hidden_size, num_hidden_layers, ...)."""
    return FfnBertConfig(vocab_size=vocab_size, layer_norm_position=layer_norm_position, **sizes)


def masked_batches(
    blocks: list[list[int]], tokenizer: PreTrainedTokenizerBase, batch_size: int, num_batches: int, seed: int = 0
) -> list[dict[str, torch.Tensor]]:
    """`num_batches` batches of the first blocks, masked by `DataCollatorForLanguageModeling` with a fixed seed
    (the same masks for every model compared). Shapes: input_ids, attention_mask, labels (batch_size, seq_len)."""
    if len(blocks) < batch_size * num_batches:
        needed = batch_size * num_batches
        raise ValueError(f"only {len(blocks)} blocks of text, need batch_size * num_batches = {needed}")
    collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15, return_tensors="pt")
    torch.manual_seed(seed)
    chunks = (blocks[i * batch_size : (i + 1) * batch_size] for i in range(num_batches))
    return [collator([{"input_ids": ids} for ids in chunk]) for chunk in chunks]


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


class _Blocks(torch.utils.data.Dataset):
    """Blocks of token ids as the `{"input_ids": [...]}` examples `DataCollatorForLanguageModeling` takes."""

    def __init__(self, blocks: list[list[int]]):
        self.blocks = blocks

    def __len__(self) -> int:
        return len(self.blocks)

    def __getitem__(self, i: int) -> dict[str, list[int]]:
        return {"input_ids": self.blocks[i]}


def train_mlm(
    config: FfnBertConfig,
    tokenizer: PreTrainedTokenizerBase,
    train_blocks: list[list[int]],
    eval_blocks: list[list[int]],
    *,
    max_steps: int,
    learning_rate: float,
    batch_size: int,
    eval_steps: int,
    seed: int = 0,
) -> dict[str, list[tuple[int, float]]]:
    """Train an `FfnBertForMaskedLM` from scratch with `Trainer`: AdamW, constant learning rate, no warm-up.

    Returns `{"train": [(step, loss), ...], "eval": [(step, loss), ...], "learning_rate": [(step, lr), ...]}`
    from the Trainer's log history (train loss averaged over each logging window of `eval_steps // 5` steps;
    eval loss on `eval_blocks`, masked afresh each evaluation; the learning rate the scheduler reported).
    Nothing is saved: the Trainer's output folder is a temporary directory.
    """
    from transformers import Trainer, TrainingArguments, set_seed

    set_seed(seed)  # same initial weights and data order for every config compared
    model = FfnBertForMaskedLM(config)
    collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15, return_tensors="pt")
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
        trainer = Trainer(
            model=model,
            args=args,
            data_collator=collator,
            train_dataset=_Blocks(train_blocks),
            eval_dataset=_Blocks(eval_blocks),
        )
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


def unigram_entropy(blocks: list[list[int]], special_ids: set[int]) -> float:
    """Entropy (nats) of the token frequencies in `blocks`, special tokens left out: the MLM loss of a model that
    ignores the context and always predicts the corpus's unigram distribution."""
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
    "masked_batches",
    "mlm_blocks",
    "mlm_config",
    "read_documents",
    "split_documents",
    "train_mlm",
    "train_tokenizer",
    "unigram_entropy",
    "uniform_loss",
    "xavier_init_",
]
