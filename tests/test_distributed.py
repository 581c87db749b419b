"""Multi-process fine-tuning: what FSDP/DeepSpeed need to wrap FfnBert, and a real 2-process DDP run on CPU."""

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from accelerate.utils import FullyShardedDataParallelPlugin
from datasets import Dataset
from safetensors.torch import load_file
from transformers import AutoTokenizer, Trainer, TrainingArguments

import hf_ffn
from hf_ffn import FfnBertForMaskedLM, FfnBertForSequenceClassification, FfnBertModel
from hf_ffn.parity import bundled_checkpoint

from . import _rank_probe
from .conftest import tiny_config

VARIANTS = {
    "default": {},
    "geglu": {"ffn_type": "geglu"},
    "swiglu_pre": {"ffn_type": "swiglu", "layer_norm_position": "pre"},
    "per_layer": {"ffn_type": ["reglu", "gelu"], "layer_norm_position": ["pre", "post"]},
}


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("model_class", [FfnBertModel, FfnBertForSequenceClassification, FfnBertForMaskedLM])
def test_fsdp_wraps_each_layer_whatever_the_variant(model_class, variant):
    """accelerate's FSDP plugin reads `_no_split_modules` (transformer_based_wrap): it must wrap the embeddings and
    each encoder layer as one unit, for every FFN variant and head (DeepSpeed ZeRO-3 and device_map read the
    same attribute)."""
    model = model_class(tiny_config(**VARIANTS[variant]))
    assert set(model._no_split_modules) == {"BertEmbeddings", "FfnBertLayer"}
    plugin = FullyShardedDataParallelPlugin(auto_wrap_policy="transformer_based_wrap")
    plugin.set_auto_wrap_policy(model)  # raises if a name in _no_split_modules is not a class in the model
    wrapped = {
        name
        for name, module in model.named_modules()
        if plugin.auto_wrap_policy(module=module, recurse=False, nonwrapped_numel=0)
    }
    prefix = "" if model_class is FfnBertModel else "bert."
    expected = {f"{prefix}embeddings"} | {f"{prefix}encoder.layer.{i}" for i in range(model.config.num_hidden_layers)}
    assert wrapped == expected


# ---------------------------------------------------------------------------------------------------------------
# The classification script, unchanged, on 2 processes (torchrun, gloo on CPU) against 1 process
# ---------------------------------------------------------------------------------------------------------------
# Same global batch (2 × 4 vs 1 × 8), same seed, no dropout. DDP's step differs from one process's only in float
# summation order: each rank back-propagates its half batch (padded to its own length) and the two gradients are
# averaged by an all-reduce, where one process sums the 8 rows' gradients in one backward. Losses agree to ~1e-7
# relative. Adam's update lr·m/(√v + ε) is scale-free, so for weights whose gradient is near rounding level the
# same tiny gradient difference becomes a larger update difference, bounded by lr: measured max |Δweight| 9e-9 at
# lr 1e-3 (2e-6 at lr 1e-2), so the weights are compared at 1e-3·lr. Except the attention key biases: softmax is
# invariant to them, so their true gradient is 0 and what each run computes is rounding noise, whose size depends on
# the CPU's kernels; Adam normalises it into steps of up to lr in an arbitrary direction (tests/test_healing.py saw
# 2e-4 apart at lr 1e-3). They are only checked to stay within Adam's bound, steps·lr, of each other. Any real
# difference is far larger: a loss scaled by the process count doubles every logged loss and gradient norm, another
# data order changes the losses at the 1e-2 level.
LEARNING_RATE = 1e-3
LOSS_RTOL = 1e-5
WEIGHT_ATOL = 1e-3 * LEARNING_RATE
GLOBAL_BATCH = 8
STEPS = 4
KEY_BIAS = "attention.self.key.bias"


def assert_same_weights_but_rounding(a: dict, b: dict, steps: int) -> float:
    """Every weight of two runs within `WEIGHT_ATOL`, the key biases (rounding noise normalised by Adam) within
    Adam's bound steps·lr; returns the largest difference outside the key biases."""
    assert a.keys() == b.keys()
    differ = max((a[k] - b[k]).abs().max().item() for k in a if not k.endswith(KEY_BIAS))
    assert differ <= WEIGHT_ATOL, differ
    assert all((a[k] - b[k]).abs().max().item() <= steps * LEARNING_RATE for k in a if k.endswith(KEY_BIAS))
    return differ


@pytest.fixture(scope="module")
def ddp_fixture(tmp_path_factory):
    """A tiny BERT (no dropout) with the bundled BERT tokenizer, and 32 + 8 labelled sentences of 3-12 tokens."""
    folder = tmp_path_factory.mktemp("ddp")
    tokenizer = AutoTokenizer.from_pretrained(bundled_checkpoint())
    torch.manual_seed(0)
    config = tiny_config(
        vocab_size=tokenizer.vocab_size,
        max_position_embeddings=128,
        ffn_type="swiglu",
        layer_norm_position="pre",
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    FfnBertForMaskedLM(config).save_pretrained(folder / "checkpoint")
    tokenizer.save_pretrained(folder / "checkpoint")
    rng = random.Random(0)
    words = {"pos": ["good", "great", "fine", "nice", "happy"], "neg": ["bad", "awful", "poor", "sad", "dull"]}
    rows = []
    for i in range(40):  # lengths vary, so each rank pads its half batch to another length than one process does
        label = ("neg", "pos")[i % 2]
        rows.append((" ".join(rng.choices(words[label], k=1 + i % 7) + ["movie"] * (i % 3)), label))
    for name, part in (("train", rows[:32]), ("validation", rows[32:])):
        (folder / f"{name}.csv").write_text("sentence,label\n" + "".join(f"{t},{label}\n" for t, label in part))
    return folder


def script_args(folder, output_dir, per_device_batch: int) -> list[str]:
    return [
        "--model_name_or_path",
        str(folder / "checkpoint"),
        "--train_file",
        str(folder / "train.csv"),
        "--validation_file",
        str(folder / "validation.csv"),
        "--output_dir",
        str(output_dir),
        "--per_device_train_batch_size",
        str(per_device_batch),
        "--max_steps",
        str(STEPS),
        "--learning_rate",
        str(LEARNING_RATE),
        "--max_seq_length",
        "16",
        "--logging_steps",
        "1",
        "--seed",
        "0",
        "--use_cpu",
        "true",
        "--report_to",
        "none",
        "--save_strategy",
        "no",
        "--disable_tqdm",
        "true",
    ]


@pytest.mark.slow
def test_torchrun_two_processes_match_one_process(ddp_fixture, tmp_path):
    """scripts/finetune_classification.py, unchanged, under torchrun on 2 gloo processes vs in one process."""
    single, ddp = tmp_path / "single", tmp_path / "ddp"
    single.mkdir()
    ddp.mkdir()
    _rank_probe.run(single, script_args(ddp_fixture, tmp_path / "out1", GLOBAL_BATCH))

    env = dict(
        os.environ,
        OMP_NUM_THREADS="1",
        TOKENIZERS_PARALLELISM="false",
        HF_HUB_OFFLINE="1",
        PYTHONPATH=os.pathsep.join([str(Path(hf_ffn.__file__).parents[1]), os.environ.get("PYTHONPATH", "")]),
    )
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        _rank_probe.__file__,
        str(ddp),
        *script_args(ddp_fixture, tmp_path / "out2", GLOBAL_BATCH // 2),
    ]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

    one = json.loads((single / "rank0.json").read_text())
    ranks = [json.loads((ddp / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert one["world_size"] == 1 and [r["world_size"] for r in ranks] == [2, 2]
    assert ranks[0]["sha256"] == ranks[1]["sha256"]  # both ranks hold identical weights
    assert len(one["losses"]) == STEPS and ranks[0]["losses"] == ranks[1]["losses"]
    torch.testing.assert_close(torch.tensor(ranks[0]["losses"]), torch.tensor(one["losses"]), rtol=LOSS_RTOL, atol=0)

    one_weights, ddp_weights = load_file(single / "rank0.safetensors"), load_file(ddp / "rank0.safetensors")
    initial = load_file(ddp_fixture / "checkpoint" / "model.safetensors")
    moved = max((one_weights[k] - initial[k]).abs().max().item() for k in initial if k in one_weights)
    differ = assert_same_weights_but_rounding(one_weights, ddp_weights, STEPS)
    print(
        f"2 processes vs 1: losses {ranks[0]['losses']} vs {one['losses']}; weights moved up to {moved:.3g}, "
        f"max |Δ| between the runs {differ:.3g} (key biases aside)"
    )
    assert moved > LEARNING_RATE / 2  # the steps really trained (Adam's first step moves weights by up to lr)
    saved = FfnBertForSequenceClassification.from_pretrained(tmp_path / "out2").state_dict()
    assert saved.keys() == ddp_weights.keys() and all(torch.equal(saved[k], ddp_weights[k]) for k in saved)


def test_gradient_accumulation_matches_full_batch(tmp_path):
    """2 accumulated micro-batches of 4 = one batch of 8: same logged loss and weights (float summation order
    aside). Guards `accepts_loss_kwargs = False`: with it True, Trainer would not divide the heads' mean losses by
    gradient_accumulation_steps and the loss and gradient would double."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 99, (8, 6), generator=g)
    data = Dataset.from_dict(
        {
            "input_ids": ids.tolist(),
            "attention_mask": torch.ones_like(ids).tolist(),
            "labels": (ids[:, 1] < 50).long().tolist(),
        }
    )
    runs = []
    for batch, accumulation in ((8, 1), (4, 2)):
        torch.manual_seed(0)
        model = FfnBertForSequenceClassification(
            tiny_config(num_labels=2, ffn_type="geglu", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        )
        args = TrainingArguments(
            output_dir=str(tmp_path / str(batch)),
            per_device_train_batch_size=batch,
            gradient_accumulation_steps=accumulation,
            max_steps=2,
            learning_rate=1e-3,
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            use_cpu=True,
            seed=0,
            disable_tqdm=True,
        )
        trainer = Trainer(model=model, args=args, train_dataset=data)
        trainer.train()
        losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
        runs.append((losses, {k: v.detach().clone() for k, v in model.state_dict().items()}))
    (full_losses, full_weights), (accumulated_losses, accumulated_weights) = runs
    torch.testing.assert_close(torch.tensor(accumulated_losses), torch.tensor(full_losses), rtol=LOSS_RTOL, atol=0)
    assert_same_weights_but_rounding(full_weights, accumulated_weights, steps=2)


@pytest.fixture
def start_group(tmp_path):
    """Starts a one-process Gloo group, as a launcher's run holds one; destroys it afterwards if still alive."""
    import torch.distributed as dist

    stores = iter(range(10))

    def start():
        dist.init_process_group("gloo", init_method=(tmp_path / f"store{next(stores)}").as_uri(), rank=0, world_size=1)
        assert dist.is_initialized()

    yield start
    if dist.is_initialized():
        dist.destroy_process_group()


def test_a_finished_command_ends_its_process_group(start_group, capsys):
    """Left to interpreter exit, Gloo's threads can abort a torchrun process after its run finished and saved
    (SIGABRT, "terminate called without an active exception": a failed exit status for a run that succeeded; seen
    in CI on tests/test_healing.py's torchrun test). `hf-ffn` and the scripts' `bad_input_exits` end the group on
    success, and only on success: after an error the other processes may wait in a collective."""
    import torch.distributed as dist

    from hf_ffn.cli import main
    from hf_ffn.training.arguments import bad_input_exits

    start_group()
    assert main(["params", "--preset", "bert-base"]) == 0 and "| BERT-base | geglu |" in capsys.readouterr().out
    assert not dist.is_initialized()

    start_group()
    with bad_input_exits("finetune_mlm.py"):
        pass
    assert not dist.is_initialized()

    start_group()
    with pytest.raises(SystemExit) as exit_status, bad_input_exits("finetune_mlm.py"):
        raise ValueError("--max_steps -1: must be > 0")
    assert exit_status.value.code == 2 and dist.is_initialized()  # an error leaves the group to the launcher
    assert capsys.readouterr().err == "finetune_mlm.py: error: --max_steps -1: must be > 0\n"
