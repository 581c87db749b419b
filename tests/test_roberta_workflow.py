"""The whole workflow on a RoBERTa checkpoint (issue 57, item 3): convert → heal (a few steps, the teacher upstream's
own class) → finetune (a few steps), on a tiny seeded RoBERTa with its byte-level BPE tokenizer."""

import pytest
import torch
import transformers
from huggingface_hub import ModelCard

from hf_ffn.conversion import convert_checkpoint
from hf_ffn.healing import HealArguments, LayerwiseArguments, run_healing
from hf_ffn.logging_utils import quiet_transformers

from .test_roberta_family import SENTENCES, roberta_checkpoint  # noqa: F401 (the fixture)
from .workflow_checks import finetune_three_steps


def texts(folder, words: int = 2000):
    import random

    rng = random.Random(0)
    vocabulary = " ".join(text for text, _ in SENTENCES).split()
    folder.mkdir()
    (folder / "a.txt").write_text(" ".join(rng.choices(vocabulary, k=words)) + "\n")
    snippets = folder.parent / "snippets"
    snippets.mkdir()
    for label in ("pos", "neg"):
        (snippets / f"{label}.txt").write_text("\n".join(t for t, lab in SENTENCES * 3 if lab == label) + "\n")
    return folder, snippets


def test_convert_heal_finetune_a_roberta_checkpoint(roberta_checkpoint, tmp_path):  # noqa: F811
    text, snippets = texts(tmp_path / "text")
    student = tmp_path / "pre"
    report = convert_checkpoint(roberta_checkpoint, student, layer_norm_position="pre")
    assert report.difference["reference"] == "transformers.RobertaForMaskedLM"
    card = ModelCard.load(student / "README.md")  # the card names the family and its upstream class, not BERT
    assert card.data.tags[:3] == ["hf_ffn", "ffn_roberta", "roberta"] and "bert" not in card.data.tags
    assert "converted with hf_ffn into a RoBERTa with a **standard**" in card.text
    assert "this head's upstream class: `transformers.RobertaForMaskedLM`" in card.text
    assert "tokenizer = RobertaTokenizer.from_pretrained" in card.text
    args = HealArguments(
        student=str(student), train_files=[str(text)], eval_data=str(snippets), max_seq_length=32, probe=False
    )
    training = transformers.TrainingArguments(
        output_dir=str(tmp_path / "heal"), max_steps=3, per_device_train_batch_size=4, learning_rate=1e-3,
        save_strategy="no", report_to="none", use_cpu=True, disable_tqdm=True,
    )  # fmt: skip
    healing = run_healing(args, training, layerwise_args=LayerwiseArguments(layerwise_tokens=2048, layerwise_steps=20))
    before, after = healing["before"]["agreement"], healing["after"]["agreement"]
    # measured: cosine 0.957 → 0.9998 (layer-wise fits of both layers, then 3 end-to-end steps)
    assert 1 - after["cosine_mean"] < 0.1 * (1 - before["cosine_mean"])
    assert healing["teacher"] == roberta_checkpoint and healing["steps"] == 3
    with quiet_transformers():
        auto = transformers.AutoModelForMaskedLM
        healed, info = auto.from_pretrained(healing["healed_dir"], output_loading_info=True)
    assert type(healed).__name__ == "FfnRobertaForMaskedLM" and healed.config.layer_norm_positions == ["pre", "pre"]
    assert not info["missing_keys"] and not info["unexpected_keys"]

    tuned = finetune_three_steps(healing["healed_dir"], tmp_path / "tuned", SENTENCES)
    assert type(tuned).__name__ == "FfnRobertaForSequenceClassification"
    assert tuned.config.layer_norm_positions == ["pre", "pre"]
    encoder = healed.roberta.state_dict()
    changed = [k for k, v in tuned.roberta.state_dict().items() if k in encoder and not torch.equal(v, encoder[k])]
    assert changed, "fine-tuning started from the healed encoder and trained it"
    card = ModelCard.load(tmp_path / "tuned" / "README.md")  # the fine-tuned card names RoBERTa too, not BERT
    assert card.data.tags[:3] == ["hf_ffn", "ffn_roberta", "roberta"] and "ffn_bert" not in card.data.tags
    assert f"from `{healing['healed_dir']}` (a RoBERTa checkpoint)" in card.text
    assert "upstream RoBERTa's: embeddings, self-attention and heads\n  (`transformers.models.roberta`;" in card.text
    assert "this head's upstream class: `transformers.RobertaForSequenceClassification`" in card.text
    assert "registers the `ffn_roberta` model type" in card.text
    assert "the tokenizer is RoBERTa's own\n(`RobertaTokenizer`)" in card.text and "BERT's" not in card.text


def test_heal_refuses_a_teacher_of_another_family(roberta_checkpoint, tmp_path):  # noqa: F811
    from hf_ffn.parity import bundled_checkpoint

    text, snippets = texts(tmp_path / "text")
    convert_checkpoint(roberta_checkpoint, tmp_path / "pre", layer_norm_position="pre")
    args = HealArguments(student=str(tmp_path / "pre"), teacher=bundled_checkpoint(), train_files=[str(text)])
    training = transformers.TrainingArguments(output_dir=str(tmp_path / "heal"), report_to="none", use_cpu=True)
    with pytest.raises(ValueError, match=r"is a ffn_roberta folder, --teacher .* of the bert family"):
        run_healing(args, training)
    flat = HealArguments(student=str(tmp_path / "pre"), train_files=[str(text)], padding_free=True)
    with pytest.raises(ValueError, match=r"--padding_free: .* is a ffn_roberta folder, whose positions count from"):
        run_healing(flat, training)
    long = HealArguments(student=str(tmp_path / "pre"), train_files=[str(text)], max_seq_length=63)
    with pytest.raises(ValueError, match=r"--max_seq_length 63: a sequence of --student .* holds at most 62 tokens"):
        run_healing(long, training)  # its 64 positions count from padding_idx + 1: blocks of 63 would not fit


@pytest.mark.parametrize(
    "source_type, model_class, expected",
    [
        ("xlm-roberta", "FfnRobertaForSequenceClassification", ("XLM-RoBERTa", "xlm-roberta", "XLMRoberta")),
        ("camembert", "FfnRobertaForMaskedLM", ("CamemBERT", "camembert", "Camembert")),
        (None, "FfnBertForMaskedLM", ("BERT", "bert", "Bert")),  # from scratch: BERT's card, with its family tag
    ],
)
def test_a_fine_tuned_card_names_the_source_family(tmp_path, source_type, model_class, expected):
    """`build_training_card` names the family of the checkpoint the run started from, as a converted card does (an
    XLM-RoBERTa's, where the model's config says only RoBERTa's), its upstream class for the head, its tokenizer."""
    import hf_ffn
    from hf_ffn.model_card import build_training_card

    name, tag, prefix = expected
    family_config = {"xlm-roberta": hf_ffn.FfnRobertaConfig, "camembert": hf_ffn.FfnRobertaConfig}
    config_class = family_config.get(source_type, hf_ffn.FfnBertConfig)
    sizes = dict(vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=24)
    model = getattr(hf_ffn, model_class)(config_class(**sizes, max_position_embeddings=24))
    base = None
    if source_type is not None:  # the source checkpoint's config.json, of the upstream family
        transformers.AutoConfig.for_model(source_type, **sizes).save_pretrained(tmp_path / "source")
        base = str(tmp_path / "source")
    task = "fill-mask" if "MaskedLM" in model_class else "text-classification"
    card = build_training_card(
        model=model, name="run", task=task, base_model=base, dataset="d", variant={"ffn_type": "gelu"},
        conversion={"new_weights": []}, results={}, metric_names=(), hyperparameters={},
    )  # fmt: skip
    assert card.data.tags == ["hf_ffn", model.config.model_type, tag, "gelu", task]
    upstream = f"{prefix}For{model_class.split('For')[1]}"
    assert f"this head's upstream class: `transformers.{upstream}`" in card.text
    assert f"the tokenizer is {name}'s own\n(`{prefix}Tokenizer`)" in card.text
    assert f"registers the `{model.config.model_type}` model type" in card.text
    if base:
        assert f"from `{base}` ({'an' if name[0] in 'AEIOX' else 'a'} {name} checkpoint)" in card.text
    else:
        assert "Pre-trained from scratch with hf_ffn (`fill-mask`) on d." in card.text
