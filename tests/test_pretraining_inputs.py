"""`hf-ffn mlm` as a `run_mlm.py` user meets it (issue 43): `--dataset_name` / `--dataset_config_name` /
`--streaming` on data sets saved here (offline), the from-scratch recipe, the plateau verdict, one line per data
phase, one-line type errors, whitespace-only lines between documents, streaming memory. Tiny models, tiny data."""

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
from transformers import AutoTokenizer
from transformers.utils import logging as hf_logging

from hf_ffn.mlm.arguments import PretrainingArguments
from hf_ffn.mlm.floors import PLATEAU_MARGIN, plateau_verdict
from hf_ffn.mlm.recipe import RECIPES, read_recipe, recipe_defaults
from hf_ffn.mlm.run import pretraining_config, pretraining_main, pretraining_parser, run_pretraining
from hf_ffn.training.arguments import parse_arguments
from hf_ffn.training.corpus import load_corpus, load_hub_corpus

from .conftest import SMALL, WORDS

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def quiet_transformers():
    hf_logging.set_verbosity_error()
    yield
    hf_logging.set_verbosity_warning()


def rows(count: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 60))) for _ in range(count)]


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    """A `save_to_disk` folder: train (40 rows and two blank ones) and validation (6 rows) splits."""
    from datasets import Dataset, DatasetDict

    folder = tmp_path_factory.mktemp("saved") / "data"
    splits = {"train": rows(40) + ["", "   "], "validation": rows(6, seed=1)}
    DatasetDict({name: Dataset.from_dict({"text": texts}) for name, texts in splits.items()}).save_to_disk(folder)
    return folder


@pytest.fixture(scope="module")
def tokenizer_folder(tmp_path_factory, saved) -> Path:
    from hf_ffn.mlm.tokenizer import train_tokenizer

    folder = tmp_path_factory.mktemp("tokenizer")
    train_tokenizer(rows(40), vocab_size=100).save_pretrained(folder)
    return folder


def argv(output_dir: Path, *extra: str, steps: int = 2) -> list[str]:
    return [
        *("--max_seq_length", "32", "--max_steps", str(steps), "--per_device_train_batch_size", "4"),
        *("--output_dir", str(output_dir), "--report_to", "none", "--use_cpu", "true", "--disable_tqdm", "true"),
        *("--cache_dir", str(output_dir.parent / "cache"), "--seed", "0", *SMALL, *extra),
    ]


def run(output_dir: Path, *extra: str, steps: int = 2) -> dict:
    args, data_args, training_args = pretraining_parser().parse_args_into_dataclasses(args=argv(output_dir, *extra))
    return run_pretraining(args, data_args, training_args)


# ---------------------------------------------------------------------------------------------------------------
# --dataset_name, --dataset_config_name, --streaming
# ---------------------------------------------------------------------------------------------------------------
def test_saved_dataset_gives_its_rows_as_documents_and_its_validation_split(saved):
    documents = load_hub_corpus(str(saved))
    # blank rows dropped; the held-out documents are the data set's own validation split
    assert (len(documents["train"]), len(documents["validation"])) == (40, 6)
    assert list(documents["validation"]["text"]) == rows(6, seed=1)
    streamed = load_hub_corpus(str(saved), streaming=True)
    assert [row["text"] for row in streamed["train"]] == rows(40)


def test_dataset_without_validation_split_holds_out_seeded_whole_rows(tmp_path):
    from datasets import Dataset

    Dataset.from_dict({"line": rows(20)}).save_to_disk(tmp_path / "one")
    documents = load_hub_corpus(str(tmp_path / "one"), validation_split_percentage=10, split_seed=3, text_column="line")
    assert (len(documents["train"]), len(documents["validation"])) == (18, 2)
    again = load_hub_corpus(str(tmp_path / "one"), validation_split_percentage=10, split_seed=3, text_column="line")
    assert list(documents["validation"]["text"]) == list(again["validation"]["text"])
    assert sorted(list(documents["train"]["text"]) + list(documents["validation"]["text"])) == sorted(rows(20))


def test_local_folder_of_files_and_a_configuration_it_lacks(tmp_path):
    """A folder of text files (`load_dataset(folder)`: the train split from train.txt, a row per line) offline; a
    configuration it does not have is named in the one-line error. (datasets >= 4 runs no loading scripts.)"""
    folder = tmp_path / "tiny_corpus"
    folder.mkdir()
    (folder / "train.txt").write_text("\n".join(f"document {i} " * 5 for i in range(30)) + "\n")
    documents = load_hub_corpus(str(folder), validation_split_percentage=10, cache_dir=str(tmp_path / "c"))
    assert (len(documents["train"]), len(documents["validation"])) == (27, 3)
    with pytest.raises(ValueError) as error:
        load_hub_corpus(str(folder), "long", cache_dir=str(tmp_path / "c"))
    assert str(error.value).startswith(
        f"--dataset_name {str(folder)!r} --dataset_config_name 'long' cannot be loaded: "
    )
    assert "BuilderConfig 'long' not found" in str(error.value) and "\n" not in str(error.value)


def test_dataset_name_run_and_streaming_run(saved, tokenizer_folder, tmp_path):
    outcome = run(tmp_path / "whole", "--dataset_name", str(saved), "--vocab_size", "100")
    assert outcome["documents"] == {"train": 40, "validation": 6}
    assert outcome["tokens_seen"] == 2 * 4 * 32 and outcome["epochs"] == 8 / outcome["blocks"]["train"]
    streamed = run(
        tmp_path / "stream",
        "--dataset_name",
        str(saved),
        "--streaming",
        "true",
        "--tokenizer_name",
        str(tokenizer_folder),
    )
    assert streamed["documents"] == {"train": "streamed", "validation": "streamed"}
    assert streamed["blocks"]["train"] == "streamed" and streamed["epochs"] is None
    assert streamed["steps"] == 2 and streamed["tokens_seen"] == 2 * 4 * 32
    assert "(streamed)" in streamed["summary"] and (tmp_path / "stream" / "model.safetensors").is_file()
    # the held-out blocks are read into memory and scored like a whole data set's
    assert streamed["blocks"]["validation"] > 0 and streamed["floors"]["unigram_mask"] > 0


@pytest.mark.parametrize(
    "extra, message",
    [
        (
            ["--dataset_name", "no-such-user/no-such-corpus"],
            "--dataset_name 'no-such-user/no-such-corpus' cannot be loaded (offline",
        ),
        (["--dataset_config_name", "wikitext-103-raw-v1"], "--dataset_config_name wikitext-103-raw-v1 applies to "),
        (["--streaming", "true"], "--streaming True applies to --dataset_name, which is not given"),
        (
            ["--dataset_name", "SAVED", "--streaming", "true", "--validation_split_percentage", "5"],
            "--streaming reads the data set as training reads it; --validation_split_percentage needs the whole",
        ),
        (
            ["--dataset_name", "SAVED", "--streaming", "true", "--preprocessing_num_workers", "2"],
            "--preprocessing_num_workers needs the whole data set",
        ),
        (["--dataset_name", "SAVED", "--streaming", "true", "--max_steps", "-1"], "--streaming needs --max_steps"),
        (["--dataset_name", "SAVED", "--streaming", "true"], "--streaming: training a tokenizer reads every"),
        (["--dataset_name", "SAVED", "--dataset_config_name", "x"], "has no configurations"),
        (
            ["--per_device_train_batch_size", "abc"],
            "--per_device_train_batch_size has value 'abc'; expected an integer",
        ),
        (["--learning_rate", "fast"], "--learning_rate has value 'fast'; expected a number"),
    ],
)
def test_bad_input_is_one_line_naming_the_option(extra, message, saved, corpus, tmp_path, capsys):
    extra = [str(saved) if value == "SAVED" else value for value in extra]
    source = [] if "--dataset_name" in extra else ["--train_files", str(corpus)]
    args = [*source, "--output_dir", str(tmp_path / "out"), "--use_cpu", "true", "--max_steps", "2", *extra]
    with pytest.raises(SystemExit) as exit_info:
        pretraining_main(args)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines == [lines[0]] and lines[0].startswith("hf-ffn mlm: error: ") and message in lines[0], err
    assert "usage:" not in err


def test_type_error_of_another_command_is_one_line_too(capsys):
    from hf_ffn.finetune.run import finetune_parser

    with pytest.raises(SystemExit) as exit_info:
        parse_arguments(finetune_parser(), ["--num_train_epochs", "three"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip().endswith("--num_train_epochs has value 'three'; expected a number")


# ---------------------------------------------------------------------------------------------------------------
# The recipe, the plateau, the phases
# ---------------------------------------------------------------------------------------------------------------
def test_scratch_recipe_sets_what_is_not_given_and_leaves_a_checkpoint_alone(tokenizer_folder, tmp_path):
    """The recipe is the parser's defaults: what the command line gives wins, the rest is the recipe's, before
    `TrainingArguments` is built; its config fields fill what --config_overrides leaves out when the config is built."""
    line = ["--train_files", "x", "--output_dir", str(tmp_path), "--layer_norm_position", "pre"]
    given_line = [*line, "--warmup_steps", "10", "--config_overrides", "hidden_dropout_prob=0.2"]
    name, recipe = recipe_defaults(pretraining_parser(), given_line)
    assert name == "scratch-pre-ln" and recipe == read_recipe(RECIPES / "scratch-pre-ln.json")
    config = recipe.pop("config_overrides")
    args, _, training_args = parse_arguments(pretraining_parser(), given_line, defaults=recipe)
    assert training_args.learning_rate == 4e-3 == recipe["learning_rate"] and training_args.warmup_steps == 10
    assert (training_args.adam_beta2, training_args.max_grad_norm, training_args.weight_decay) == (0.98, 0.5, 0.01)
    assert training_args.adam_epsilon == 1e-6
    # the user's dropout kept, the recipe's other config fields added
    built = pretraining_config(args, AutoTokenizer.from_pretrained(tokenizer_folder), 512, config)
    assert (built.hidden_dropout_prob, built.attention_probs_dropout_prob, built.initializer_range) == (0.2, 0.0, 0.05)
    post_line = ["--train_files", "x", "--output_dir", "o"]
    name, post = recipe_defaults(pretraining_parser(), post_line)
    assert post.pop("config_overrides") == config  # the same config fields for both placements
    post_training = parse_arguments(pretraining_parser(), post_line, defaults=post)[2]
    assert name == "scratch-post-ln" and post_training.learning_rate == 1e-3 == post["learning_rate"]
    for no_recipe in (["--model_name_or_path", "some/bert"], ["--recipe", "none"]):  # Trainer's defaults
        assert recipe_defaults(pretraining_parser(), [*post_line, *no_recipe]) == (None, {})
        plain = parse_arguments(pretraining_parser(), [*post_line, *no_recipe], defaults={})[2]
        assert plain.learning_rate == 5e-5 and plain.warmup_steps == 0
    # a copied recipe file, edited, in a .json file of arguments too
    mine = tmp_path / "mine.json"
    mine.write_text(json.dumps({**read_recipe("scratch-post-ln"), "learning_rate": 2e-3}))
    arguments = tmp_path / "args.json"
    arguments.write_text(json.dumps({"train_files": ["x"], "output_dir": "o", "recipe": str(mine), "seed": 3}))
    name, recipe = recipe_defaults(pretraining_parser(), [str(arguments)])
    recipe.pop("config_overrides")
    from_file = parse_arguments(pretraining_parser(), [str(arguments)], defaults=recipe)[2]
    assert name == str(mine) and (from_file.learning_rate, from_file.warmup_steps, from_file.seed) == (2e-3, 300, 3)


def test_a_bad_recipe_names_the_recipe_and_what_is_wrong(tmp_path):
    line = ["--train_files", "x"]
    with pytest.raises(FileNotFoundError, match=r"--recipe 'fast': no such recipe or file; allowed: auto, none, cuda"):
        recipe_defaults(pretraining_parser(), [*line, "--recipe", "fast"])
    typo = tmp_path / "typo.json"
    typo.write_text(json.dumps({"learning_rat": 1e-3}))
    with pytest.raises(ValueError, match=r"--recipe .*typo.json: learning_rat is not an option of hf-ffn mlm"):
        recipe_defaults(pretraining_parser(), [*line, f"--recipe={typo}"])
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"config_overrides": {"initializer_range": 0.05}}))
    kept = r"--recipe .*config.json: --config_overrides: 'initializer_range' cannot"  # a checkpoint keeps it
    with pytest.raises(ValueError, match=kept):
        recipe_defaults(pretraining_parser(), [*line, "--model_name_or_path", "m", "--recipe", str(config)])
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"a recipe is a JSON object of option values"):
        recipe_defaults(pretraining_parser(), [*line, "--recipe", str(tmp_path / "list.json")])


def test_plateau_verdict_hand_checked():
    stuck = plateau_verdict(6.5, 6.7)  # 0.2 below the floor: not learned
    assert stuck["learned"] is False and stuck["below_floor"] == pytest.approx(0.2)
    assert "6.5000 is 0.20 nats below the unigram floor 6.7000" in stuck["message"]
    assert "docs/pretraining.md#the-plateau" in stuck["message"]
    learned = plateau_verdict(5.934, 6.616)  # the study's 10,000-step pilot: 0.68 below
    assert learned["learned"] is True and learned["message"] == "" and PLATEAU_MARGIN == 0.3
    assert plateau_verdict(7.0, 6.7)["message"].startswith(
        "NOT LEARNED YET: held-out [MASK] loss 7.0000 is 0.30 nats above"
    )


def test_cli_run_prints_the_recipe_phases_and_the_plateau_line(corpus, tmp_path, capsys):
    (tmp_path / "text.txt").write_text("\n \n".join(rows(30)) + "\n")  # documents separated by lines of one space
    assert (
        pretraining_main(["--train_files", str(tmp_path / "text.txt"), "--vocab_size", "100", *argv(tmp_path / "run")])
        == 0
    )
    out = capsys.readouterr().out
    recipe = [line for line in out.splitlines() if line.startswith("hf-ffn mlm: recipe scratch-post-ln (give an")]
    assert len(recipe) == 1 and "--learning_rate 0.001 --warmup_steps 300" in recipe[0]
    assert "initializer_range=0.05" in recipe[0]
    steps = json.loads((tmp_path / "run" / "run_info.json").read_text())["steps"]  # far fewer than 300
    assert f"hf-ffn mlm: note: --max_steps {steps} ends within the recipe's warm-up of 300 steps" in out
    for phase in (
        "read 30 documents: 27 train, 3 held out",
        "trained a WordPiece tokenizer",
        "tokenized the documents",
        "cut blocks of 32",
        "masked the held-out blocks 1 time(s)",
        "context-free floors",
    ):
        assert any(line.startswith(f"hf-ffn mlm: {phase}") and line.endswith(" s)") for line in out.splitlines()), phase
    info = json.loads((tmp_path / "run" / "run_info.json").read_text())
    assert info["plateau"]["learned"] is False and info["recipe"]["learning_rate"] == 1e-3
    assert set(info["phase_seconds"]) == {"reading", "tokenizer", "tokenizing", "blocks", "maskings", "floors"}
    assert info["plateau"]["message"] in out and "NOT LEARNED YET" in out
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert (config["hidden_dropout_prob"], config["initializer_range"]) == (0.0, 0.05)


def test_whitespace_only_lines_separate_documents(tmp_path):
    (tmp_path / "a.txt").write_text("one\n \ntwo\n\t\nthree\n\nfour\nstill four\n")
    documents = load_corpus([tmp_path / "a.txt"], validation_split_percentage=25, cache_dir=str(tmp_path / "c"))
    texts = sorted(list(documents["train"]["text"]) + list(documents["validation"]["text"]))
    assert texts == ["four\nstill four", "one", "three", "two"]


# ---------------------------------------------------------------------------------------------------------------
# Streaming memory: bounded whatever the corpus size
# ---------------------------------------------------------------------------------------------------------------
STREAM_SCRIPT = r"""
import json, sys, tracemalloc
from pathlib import Path
from transformers.utils import logging
logging.set_verbosity_error()
from hf_ffn.mlm.run import pretraining_parser, run_pretraining
argv = json.loads(sys.argv[1])
args, data_args, training_args = pretraining_parser().parse_args_into_dataclasses(args=argv)
tracemalloc.start()
run_pretraining(args, data_args, training_args)
print("PEAK", tracemalloc.get_traced_memory()[1])
"""


def test_streaming_memory_and_disk_do_not_grow_with_the_corpus(tokenizer_folder, tmp_path):
    """A folder of train-NN.txt shards (500 lines, ~0.06 MB each) and validation.txt, streamed: 2 shards vs 4. The
    context-free floors read the whole training stream (every shard is read and tokenized), `STREAM_COUNT_BATCH`
    blocks at a time: two shards already fill a batch, so a bounded reader's peak is the same for both."""
    peaks, cached, counted = {}, {}, {}
    for shards in (2, 4):
        folder = tmp_path / f"corpus{shards}"
        folder.mkdir()
        for shard in range(shards):
            (folder / f"train-{shard:02d}.txt").write_text("\n".join(rows(500, seed=shard)) + "\n")
        (folder / "validation.txt").write_text("\n".join(rows(20, seed=99)) + "\n")
        cache = tmp_path / f"cache{shards}"
        extra = ["--dataset_name", str(folder), "--streaming", "true", "--tokenizer_name", str(tokenizer_folder)]
        extra += ["--cache_dir", str(cache), "--logging_steps", "100", "--eval_strategy", "no"]
        args = argv(tmp_path / f"run{shards}", *extra, steps=1)
        result = subprocess.run(
            [sys.executable, "-c", STREAM_SCRIPT, json.dumps(args)],
            capture_output=True,
            text=True,
            timeout=600,
            cwd=REPO,
            env={"PATH": "", "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "PYTHONPATH": str(REPO)},
        )
        assert result.returncode == 0, result.stderr[-3000:]
        peaks[shards] = int(result.stdout.split("PEAK")[1])
        cached[shards] = sum(f.stat().st_size for f in cache.rglob("*.arrow")) if cache.exists() else 0
        info = json.loads((tmp_path / f"run{shards}" / "run_info.json").read_text())
        counted[shards] = info["floors"]["training_tokens_counted"]
    # twice the corpus: no training text written to the cache, traced Python memory within 1 MB
    print("streaming peaks (bytes):", peaks)
    assert cached == {2: 0, 4: 0}
    assert 1.8 < counted[4] / counted[2] < 2.2, counted  # the whole stream was read: twice the tokens
    assert abs(peaks[4] - peaks[2]) < 2**20, peaks


def test_ffn_width_matched_has_one_meaning_from_scratch_and_for_a_checkpoint(tmp_path):
    from transformers import BertConfig, BertModel

    from hf_ffn.configuration_ffn_bert import parameter_matched_glu_width
    from hf_ffn.mlm.arguments import ffn_width

    from .conftest import TINY

    BertModel(BertConfig(**TINY)).save_pretrained(tmp_path / "bert")  # intermediate_size 37: 2/3 of it is 24.7
    checkpoint = PretrainingArguments(model_name_or_path=str(tmp_path / "bert"), ffn_type="swiglu", ffn_width="matched")
    assert checkpoint.model_arguments().ffn_width == "24" == str(ffn_width("swiglu", 37, "matched"))
    assert parameter_matched_glu_width(37) == 256  # the conversion's rounding, no longer what mlm's 'matched' means
    standard = PretrainingArguments(model_name_or_path=str(tmp_path / "bert"), ffn_width="matched")
    assert standard.model_arguments().ffn_width == "37"  # a standard FFN keeps its width, as from scratch
    assert PretrainingArguments(model_name_or_path=str(tmp_path / "bert")).model_arguments().ffn_width == "keep"
