"""What every family's workflow tests do the same way: labelled sentence files, and a few fine-tuning steps."""

import transformers

from hf_ffn.logging_utils import quiet_transformers


def sentence_files(folder, sentences) -> dict[str, str]:
    """`sentences` ((text, label) pairs) as `train.csv` and `validation.csv` in `folder` (columns sentence, label);
    `finetune`'s `train_file` / `validation_file` keywords."""
    files = {}
    for split in ("train", "validation"):
        files[f"{split}_file"] = str(folder / f"{split}.csv")
        lines = ["sentence,label", *(f"{text},{label}" for text, label in sentences)]
        (folder / f"{split}.csv").write_text("\n".join(lines) + "\n")
    return files


def finetune_three_steps(start: str, output_dir, sentences):
    """`hf_ffn.finetune.finetune` of `start` for 3 SGD steps on `sentences`; asserts 3 logged losses that moved and
    returns the saved classifier, loaded by `AutoModelForSequenceClassification`."""
    from hf_ffn.finetune import finetune

    files = sentence_files(output_dir.parent, sentences)
    options = dict(max_steps=3, logging_steps=1, optim="sgd", learning_rate=0.5, per_device_train_batch_size=3)
    result = finetune(
        start, str(output_dir), report_to="none", use_cpu=True, save_strategy="no", quiet=True, **options, **files
    )
    losses = [e["loss"] for e in result["log_history"] if "loss" in e]
    assert len(losses) == 3 and losses[-1] != losses[0]
    with quiet_transformers():
        return transformers.AutoModelForSequenceClassification.from_pretrained(output_dir)
