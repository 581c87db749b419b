"""What the training commands share (`hf-ffn finetune`: `hf_ffn.finetune`; `hf-ffn mlm`: `hf_ffn.mlm`; `hf-ffn heal`:
`hf_ffn.healing`), each piece in one module:

- `arguments`: `ModelArguments` (the checkpoint and the variant to train it as), the numeric options' checks,
  `parse_arguments` (argv or one .json file), the one-line errors and exit status of bad input,
  `--resume_from_checkpoint`.
- `readers`: labelled text (a folder with one file per label, a csv/tsv/json file, a `datasets` dataset), the seeded
  split, plain-text documents.
- `corpus`: plain text through `datasets`, corpus → documents → blocks → masks, and its fixed maskings.
- `collators`: `PaddingFreeCollator`.
- `outputs`: checkpoint and tokenizer loading, output-folder checks, the finished save, the final evaluation, the card.

Everything that can be wrong with the input raises before any training starts, naming the file or field, the value and
what is allowed.
"""
