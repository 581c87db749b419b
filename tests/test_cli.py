"""`hf-ffn`: every subcommand end to end on a tiny BERT (with the bundled checkpoint's tokenizer) and tiny data
written by the test; every --help shows defaults; the command's import stays light (no torch, no transformers
before a subcommand runs); `hf-ffn compare` writes its table from the runs, resumes without re-running, and
refuses other settings."""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer, BertConfig, BertForPreTraining, TrainingArguments
from transformers.utils import logging as hf_logging

from hf_ffn.cli import COMMON_TRAINING_OPTIONS, PASSTHROUGH, build_parser, main, passthrough_parser
from hf_ffn.comparing import paired_differences, paired_t_interval

from .conftest import TINY
from .test_tasks import WORDS, write_stsb

REPO = Path(__file__).resolve().parents[1]
TEXT = (
    " ".join(
        f"the {word} cat sat on the mat and the dog ran to the {word} park."
        for word in ("red", "blue", "green", "old", "new", "big", "small", "far")
    )
    + "\n"
)


@pytest.fixture(scope="module")
def tiny_bert(bundled_checkpoint, tmp_path_factory) -> str:
    """An upstream BertForPreTraining of TINY sizes with the bundled checkpoint's vocabulary and tokenizer."""
    hf_logging.set_verbosity_error()
    folder = tmp_path_factory.mktemp("cli_tiny_bert")
    tokenizer = AutoTokenizer.from_pretrained(bundled_checkpoint)
    torch.manual_seed(0)
    config = BertConfig(**{**TINY, "vocab_size": tokenizer.vocab_size, "max_position_embeddings": 128})
    BertForPreTraining(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def data_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("cli_data")
    write_stsb(root / "stsb", lines_per_split=16)
    (root / "text").mkdir()
    (root / "text" / "a.txt").write_text(TEXT * 4)
    (root / "text" / "b.txt").write_text(TEXT.upper() * 4)
    return root


def run(capsys, *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().out


@pytest.mark.slow
def test_import_of_the_command_defers_torch_and_transformers():
    """An observation, not a timing: inside the `hf-ffn` command (argv[0]), importing hf_ffn.cli and building its
    parser imports neither torch nor transformers; a plain `import hf_ffn` still registers the Auto classes."""
    code = (
        "import sys; sys.argv[0] = 'hf-ffn'; import hf_ffn.cli; hf_ffn.cli.build_parser(); "
        "print(sorted(m for m in ('torch', 'transformers', 'datasets', 'scipy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO).stdout
    assert out.strip() == "[]"
    code = (
        "import sys, hf_ffn; from transformers import AutoConfig; "
        "print(type(AutoConfig.for_model('ffn_bert')).__name__, 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO).stdout
    assert out.strip() == "FfnBertConfig True"


@pytest.mark.parametrize(
    ("command", "shown"),
    [
        ("parity", "Attention implementation. (default: eager)"),
        ("convert", "(default: preserving)"),
        ("compare", "(default: out/compare)"),
        ("sts", "Split to score: test, validation or train. (default: test)"),
        ("heal", "(default: layerwise)"),
        ("finetune", "(default: 0.8,0.1,0.1)"),
        ("mlm", "(default: 0.15)"),
    ],
)
def test_every_help_shows_defaults(command, shown, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert shown in out


def test_options_are_snake_case_only(capsys):
    """hf-ffn's own options have one spelling: the kebab-case twins and parity's and sts's --model are refused as
    unrecognized arguments (exit 2); so is `--help-all` beside `--help_all`."""
    parser = build_parser()
    for argv, name, value in [
        (["parity", "--ffn_type", "geglu"], "ffn_type", "geglu"),
        (["convert", "a", "b", "--layer_norm_position", "pre"], "layer_norm_position", "pre"),
        (["convert", "a", "b", "--to_bert"], "to_bert", True),
        (["sts", "--model_name_or_path", "m", "--data_dir", "d", "--batch_size", "8"], "batch_size", 8),
    ]:
        assert getattr(parser.parse_args(argv), name) == value
    for argv, message in (
        (["parity", "--ffn-type", "geglu"], "unrecognized arguments: --ffn-type geglu"),
        (["convert", "a", "b", "--layer-norm-position", "pre"], "unrecognized arguments: --layer-norm-position pre"),
        (["convert", "a", "b", "--to-bert"], "unrecognized arguments: --to-bert"),
        (["sts", "--model_name_or_path", "m", "--data_dir", "d", "--batch-size", "8"], "arguments: --batch-size 8"),
        (["parity", "--model", "m"], "unrecognized arguments: --model m"),  # nor an abbreviation of the option
        (["sts", "--model", "m", "--data_dir", "d"], "the following arguments are required: --model_name_or_path"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2 and message in capsys.readouterr().err, argv
    with pytest.raises(SystemExit) as exit_info:
        main(["heal", "--student", "s", "--train_files", "f", "--help-all"])
    assert exit_info.value.code == 2 and "arguments are not used by the HfArgumentParser: ['--help-all']" in (
        capsys.readouterr().err
    )


def test_parity_and_params(tiny_bert, capsys):
    code, out = run(capsys, "parity", "--model_name_or_path", tiny_bert, "--json")
    document = json.loads(out)
    assert code == 0 and document["exact"] is True and document["unpadded_within_tolerance"] is True
    assert all(row["equal"] for row in document["rows"] if row["tolerance"] is None)
    assert all(row["holds"] for row in document["rows"])
    code, out = run(capsys, "params", "--preset", "bert-base", "--json")
    gelu = next(row for row in json.loads(out) if row["ffn_type"] == "gelu")
    # BERT-base's FFN: two 768 x 3072 matrices, biases 3072 + 768, per layer
    assert code == 0 and (gelu["intermediate_size"], gelu["ffn_weights"], gelu["ffn_biases"]) == (
        3072,
        2 * 768 * 3072,
        3072 + 768,
    )


def test_convert_by_variant_name_and_heal(tiny_bert, data_root, tmp_path, capsys, caplog, monkeypatch):
    out = tmp_path / "swiglu"
    code, printed = run(capsys, "convert", tiny_bert, str(out), "--variant", "swiglu-approx")
    config = json.loads((out / "config.json").read_text())
    assert code == 0 and config["ffn_type"] == "swiglu" and f"wrote {out}" in printed
    with pytest.raises(SystemExit) as exit_info:  # a named variant sets the switches itself
        main(["convert", tiny_bert, str(tmp_path / "no"), "--variant", "geglu", "--ffn_type", "swiglu"])
    assert (
        exit_info.value.code == 2
        and "--variant geglu sets the switches itself; remove --ffn_type" in capsys.readouterr().err
    )
    student = shutil.copytree(out, tmp_path / "student")  # a folder whose load has not warned in this process
    caplog.clear()  # the conversion's own warning
    with caplog.at_level(logging.WARNING, logger="hf_ffn.conversion_warning"):
        code, printed = run(
            capsys,
            "heal",
            "--student",
            str(student),
            "--train_files",
            str(data_root / "text"),
            "--teacher",
            tiny_bert,
            "--output_dir",
            str(tmp_path / "heal"),
            "--max_seq_length",
            "32",
            "--layerwise_steps",
            "0",
            "--layerwise_tokens",
            "256",
            "--max_steps",
            "0",
            "--report_to",
            "none",
        )
    # healing is the next step the warning names: loading its own student does not ask for it
    assert [r.getMessage() for r in caplog.records if "not function-preserving" in r.getMessage()] == []
    # one summary line (run_healing's), no JSON dump; the record is in healing.json
    assert code == 0 and "{" not in printed
    (summary,) = [line for line in printed.splitlines() if line.startswith("healed: ")]
    assert summary.endswith(f"saved to {tmp_path / 'heal' / 'healed'} (record: healing.json)")
    assert json.loads((tmp_path / "heal" / "healing.json").read_text())["healed_dir"] == str(
        tmp_path / "heal" / "healed"
    )
    assert json.loads((tmp_path / "heal" / "healed" / "config.json").read_text())["ffn_type"] == "swiglu"
    # without --output_dir: out/heal/<student folder>, not Trainer's ./trainer_output; run again: beside it
    monkeypatch.chdir(tmp_path)
    argv = ["heal", "--student", str(student), "--train_files", str(data_root / "text"), "--teacher", tiny_bert]
    argv += ["--max_seq_length", "32", "--layerwise_steps", "0", "--layerwise_tokens", "256", "--max_steps", "0"]
    for expected in ("student", "student-2"):
        code, printed = run(capsys, *argv, "--report_to", "none")
        healed = Path("out") / "heal" / expected / "healed"
        assert code == 0 and f"saved to {healed} (record: healing.json)" in printed
        assert (tmp_path / healed / "config.json").is_file()
    assert not (tmp_path / "trainer_output").exists()


def test_heal_usage_names_any_labelled_data(capsys):
    for flag, shown in (("--help", "--eval_data PATH "), ("--help_all", "[--eval_data PATH]")):
        with pytest.raises(SystemExit) as exit_info:
            main(["heal", flag])
        usage = capsys.readouterr().out
        assert exit_info.value.code == 0 and shown in usage
        assert "eval_dir" not in usage and "rt_polarity" not in usage.lower()


def help_text(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(list(argv))
    assert exit_info.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("command", PASSTHROUGH)
def test_training_commands_help_leads_with_their_own_options(command, capsys):
    """`--help` of heal/finetune/mlm: usage, description, examples, then every option of the command's own
    dataclasses (whatever they hold: read from its parser), then COMMON_TRAINING_OPTIONS of TrainingArguments'
    fields and no other; `--help_all` is the parser's own help, every option."""
    parser = passthrough_parser(command)
    own = [kind for kind in parser.dataclass_types if kind is not TrainingArguments]
    text = help_text(capsys, command, "--help")
    lines = text.splitlines()
    assert lines[0].startswith(f"usage: hf-ffn {command} --") and "examples:" in lines[:12]
    headings = [line for line in lines if line.endswith(":") and not line.startswith(" ")]
    assert headings == ["examples:", *(f"{kind.__name__} options:" for kind in own), "training options:", "exit codes:"]
    options = {line.split()[0] for line in lines if line.startswith("  --")}  # the options listed, not the prose
    for kind in own:
        assert {f"--{field.name}" for field in dataclasses.fields(kind)} <= options, kind
    training = {f"--{field.name}" for field in dataclasses.fields(TrainingArguments)}
    assert options & training - {f"--{f.name}" for kind in own for f in dataclasses.fields(kind)} == {
        f"--{name}" for name in COMMON_TRAINING_OPTIONS
    }
    assert f"6 of the {len(training)} options of transformers' TrainingArguments; `hf-ffn {command} --help_all`" in (
        " ".join(text.split())
    )
    fields = training | {f"--{field.name}" for kind in own for field in dataclasses.fields(kind)}
    assert not any(option.replace("_", "-") in options for option in fields if "_" in option)  # no kebab twins
    full = help_text(capsys, command, "--help_all")
    assert full == parser.format_help()
    assert "--gradient_accumulation_steps" in full and len(text.splitlines()) < len(full.splitlines()) / 3


def test_finetune_ends_with_the_task_score(tiny_bert, data_root, tmp_path, capsys):
    code, printed = run(
        capsys,
        "finetune",
        "--model_name_or_path",
        tiny_bert,
        "--task",
        "stsb",
        "--data_dir",
        str(data_root / "stsb"),
        "--output_dir",
        str(tmp_path / "ft"),
        "--max_steps",
        "2",
        "--per_device_train_batch_size",
        "4",
        "--max_seq_length",
        "32",
        "--report_to",
        "none",
    )
    last = printed.strip().splitlines()[-1]
    results = json.loads((tmp_path / "ft" / "all_results.json").read_text())
    score = 50 * (results["eval_pearson"] + results["eval_spearman"])
    assert code == 0 and last.startswith(f"task=stsb score={score:.2f} (pearson={results['eval_pearson']:.4f}")


def test_finetune_without_output_dir_saves_under_out_and_runs_again(
    tiny_bert, data_root, tmp_path, capsys, monkeypatch
):
    """README's line has no --output_dir: the run saves to out/finetune/<task>-<checkpoint> (not Trainer's
    ./trainer_output), says so, and the same command run again saves a second model beside the first."""
    monkeypatch.chdir(tmp_path)
    argv = ["finetune", "--model_name_or_path", tiny_bert, "--task", "stsb", "--data_dir", str(data_root / "stsb")]
    argv += ["--max_steps", "1", "--per_device_train_batch_size", "4", "--max_seq_length", "32", "--report_to", "none"]
    name = f"out/finetune/stsb-{Path(tiny_bert).name}"
    for folder in (name, f"{name}-2"):
        code, printed = run(capsys, *argv)
        assert code == 0 and f"saved to {folder} (model, tokenizer" in printed.strip().splitlines()[-2]
        assert (tmp_path / folder / "config.json").is_file() and (tmp_path / folder / "all_results.json").is_file()
    assert not (tmp_path / "trainer_output").exists()


def test_mlm_trains_and_saves(tiny_bert, data_root, tmp_path, capsys):
    code, printed = run(
        capsys,
        "mlm",
        "--model_name_or_path",
        tiny_bert,
        "--train_files",
        str(data_root / "text"),
        "--output_dir",
        str(tmp_path / "mlm"),
        "--max_steps",
        "2",
        "--max_seq_length",
        "32",
        "--per_device_train_batch_size",
        "2",
        "--validation_split_percentage",
        "50",
        "--report_to",
        "none",
    )
    assert code == 0 and (tmp_path / "mlm" / "config.json").is_file() and f"saved to {tmp_path / 'mlm'}" in printed


def test_sts_scores_a_checkpoint(tiny_bert, data_root, capsys):
    code, out = run(capsys, "sts", "--model_name_or_path", tiny_bert, "--data_dir", str(data_root / "stsb"), "--json")
    result = json.loads(out)
    assert code == 0 and result["pairs"] == 16 and -1.0 <= result["spearman"] <= 1.0


def test_compare_two_variants_writes_table_resumes_and_refuses_other_settings(
    tiny_bert, data_root, tmp_path, capsys, caplog
):
    output = tmp_path / "compare"
    argv = [
        "compare",
        "--model_name_or_path",
        tiny_bert,
        "--data_dir",
        str(data_root),
        "--variants",
        "gelu-post",
        "swiglu-approx",
        "--tasks",
        "stsb",
        "--seeds",
        "0",
        "--output_dir",
        str(output),
        "--smoke",
        "--max_steps",
        "2",
        "--max_seq_length",
        "32",
    ]
    with caplog.at_level(logging.WARNING):
        code, printed = run(capsys, *argv)
    assert code == 0
    # compare heals by itself: the converter's "Next step: heal it" is not shown
    assert not [r for r in caplog.records if "Next step" in r.getMessage()] and "Next step" not in printed
    assert "[compare] swiglu-approx: healing into" in printed
    runs = [json.loads(line) for line in (output / "runs.jsonl").read_text().splitlines()]
    assert [(r["variant"], r["task"], r["seed"]) for r in runs] == [
        ("gelu-post", "stsb", 0),
        ("swiglu-approx", "stsb", 0),
    ]
    for r in runs:  # the score is the task's: the mean of Pearson and Spearman, ×100
        assert r["score"] == pytest.approx(50 * (r["metrics"]["pearson"] + r["metrics"]["spearman"]))
        assert Path(r["run_dir"]) == output / "runs" / r["variant"] / "stsb" / "seed0"
        assert (Path(r["run_dir"]) / "all_results.json").is_file()
    assert runs[0]["start"] == str(output / "variants" / "gelu-post" / "converted")  # exact: not healed
    assert runs[1]["start"] == str(output / "variants" / "swiglu-approx" / "healed")
    # the default healing text: the task's training sentences, both sides of each pair
    assert (output / "heal_text" / "stsb.txt").read_text().splitlines()[:2] == [
        f"the {WORDS[0]} cat sat",
        f"the {WORDS[0]} dog ran",
    ]
    table = (output / "comparison.md").read_text()
    base, other = runs[0]["score"], runs[1]["score"]
    assert f"| stsb | gelu-post | 0 | {base:.2f} | (baseline) |  |" in table
    assert f"| stsb | swiglu-approx | 0 | {other:.2f} | {other - base:+.2f} | 1 paired seed: no interval |" in table
    assert table in printed
    figure = output / "comparison.png"
    assert figure.is_file() == _has_matplotlib()
    # resume: nothing runs again
    code, printed = run(capsys, *argv)
    assert code == 0 and printed.count("finished before, skipped") == 2
    assert len((output / "runs.jsonl").read_text().splitlines()) == 2
    # other settings in the same folder are refused before any work
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--learning_rate", "1e-3"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "holds a comparison with other settings" in err and "learning_rate" in err


def _has_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def test_paired_statistics_by_hand():
    from scipy import stats

    # differences 1.5 and 2.0 (paired by seed): mean 1.75, sd √0.125, t_{0.975, 1}
    runs = [{"seed": 0, "score": 61.5}, {"seed": 1, "score": 65.0}, {"seed": 2, "score": 70.0}]
    reference = [{"seed": 0, "score": 60.0}, {"seed": 1, "score": 63.0}]
    half = stats.t.ppf(0.975, 1) * 0.125**0.5 / 2**0.5
    assert paired_differences(runs, reference) == [1.5, 2.0]  # seed 2 has no reference run
    assert paired_t_interval(paired_differences(runs, reference)) == pytest.approx((1.75, 1.75 - half, 1.75 + half))
    with pytest.raises(ValueError, match="at least 2 paired differences, got 1"):
        paired_t_interval([0.5])


def test_compare_refuses_an_unknown_variant_or_task_before_any_work(tiny_bert, data_root, tmp_path, capsys):
    base = [
        "compare",
        "--model_name_or_path",
        tiny_bert,
        "--data_dir",
        str(data_root),
        "--seeds",
        "0",
        "--output_dir",
        str(tmp_path / "out"),
    ]
    for extra, named in (
        (
            ["--variants", "swiglu-fast", "--tasks", "stsb"],
            "--variants has unknown value 'swiglu-fast'; allowed: gelu-post",
        ),
        (["--variants", "geglu", "--tasks", "sst5"], "--tasks has unknown value 'sst5'; allowed: "),
        (
            ["--max_steps", "-3"],
            "argument --max_steps: got -3; allowed: an integer >= 1 (leave the option out for the task's epochs)",
        ),
        (["--learning_rate", "0"], "argument --learning_rate: got 0; allowed: a number > 0"),
        (["--seeds", "0", "-1"], "argument --seeds: got -1; allowed: an integer >= 0 and <= 4294967295"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            main([*base, *extra])
        assert exit_info.value.code == 2 and named in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_convert_names_the_variant_option(tiny_bert, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["convert", tiny_bert, str(tmp_path / "out"), "--variant", "swiglu"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "error: --variant has unknown value 'swiglu'; allowed: gelu-post, " in err


def test_help_reads_for_a_user(capsys):
    def help_of(*argv: str) -> str:
        with pytest.raises(SystemExit):
            main([*argv, "--help"])
        return " ".join(capsys.readouterr().out.split())

    top = help_of()
    assert "user_message" not in top and "EXIT_CODES" not in top and "hf-ffn parity" not in top
    assert top.count("Check that hf_ffn reproduces upstream BERT") == 1  # the subcommands listed once
    assert (
        "-h, --help" in top and "2 bad input" in top and "3 parity" not in top and "1 parity failed" not in top
    )  # parity's codes: parity's
    assert "1 parity failed" in help_of("parity") and "3 parity: the checkpoint is an FfnBert variant" in help_of(
        "parity"
    )
    sts = help_of("sts")
    # the checkpoint option spelled as finetune/mlm/compare spell it
    assert "--model_name_or_path MODEL_NAME_OR_PATH --data_dir DATA_DIR [--split" in sts and "--model " not in sts
    assert "about a minute on 2 CPU cores" in help_of("compare")
    assert build_parser().parse_args(["sts", "--model_name_or_path", "m", "--data_dir", "d"]).model_name_or_path == "m"
    with pytest.raises(SystemExit):
        main(["sts", "--model_name_or_path", "m"])
    assert "the following arguments are required: --data_dir" in capsys.readouterr().err


def test_compare_shows_healing_warnings_once_in_its_own_terms(capsys):
    from hf_ffn.comparing import LAYERWISE_LOGGER, _few_tokens_in_compare, warnings_once
    from hf_ffn.healing.layerwise import check_calibration_tokens

    with warnings_once(LAYERWISE_LOGGER, _few_tokens_in_compare("swiglu-approx", smoke=True)):
        check_calibration_tokens(2048, 1536)  # logged by the preparation and again by the fit
        check_calibration_tokens(2048, 1536)
    out = capsys.readouterr().out
    assert out == (
        "[compare] swiglu-approx: healing on 2,048 tokens for 1,536 FFN units; the fit may match its healing text "
        "only (a smoke run heals on few tokens on purpose)\n"
    )


def test_compare_lists_the_named_variants_and_tasks(capsys):
    from hf_ffn.finetune.tasks import TASKS
    from hf_ffn.variants import VARIANTS

    code, out = run(capsys, "compare", "--list")
    names = [line.split()[:2] for line in out.splitlines()]
    assert code == 0 and names == [["variant", name] for name in VARIANTS] + [["task", name] for name in TASKS]
