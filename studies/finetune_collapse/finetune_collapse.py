"""Does fine-tuning collapse a model's representation? A short STS-B fine-tune per model folder, the encoder
measured before and after (studies/four_tasks/README.md, "Why the healed Pre-LN does not learn STS-B, CoLA or MRPC").

The baseline (`--baseline`, default the bundled all-MiniLM-L6-v2) and each `--model NAME=FOLDER` are fine-tuned
on STS-B (`hf_ffn.finetune.classification.run_classification`, `Trainer`) with the
four-task table's settings (batch 16, learning rate 1e-4, max_seq_length 128, unpadded, length-grouped batches)
for `--steps` optimizer steps: the table's warm-up (10% of one epoch: 36 steps), then a constant learning rate
(`constant_with_warmup`), so the first steps are the table's first steps. `--dropout P` fine-tunes a copy of the
folder whose config sets `hidden_dropout_prob` and `attention_probs_dropout_prob` to P. Then, on the first
`--pairs` STS-B validation pairs (encoded as BERT pairs), for the encoder before and after:

- **spread** (no unit): the standard deviation over the pairs of each hidden dimension of the last hidden state,
  averaged over dimensions and divided by the mean norm of the vectors (0: every input gives the same vector), at
  [CLS] (what `BertPooler` and so the classification head read) and mean-pooled over real tokens;
- per layer, the mean norm at [CLS] of the attention sublayer's output (`attention.output.dense`, before dropout
  and the residual add) and of the FFN's (`mlp`); models are loaded as `FfnBertModel` (a BERT checkpoint loads
  bit-exact) so the module names are the same for every variant;
- **dropout cosine**: the cosine similarity at real tokens between the last hidden state with the config's dropout
  on (as in fine-tuning) and off (1: dropout changes nothing);
- the validation Pearson correlation (×100) of the fine-tuned regression head (the whole validation set).

Writes `collapse.json` and `collapse.md` to `--output_dir` (default out/finetune_collapse). About 2 minutes per
model here (100 steps at ~0.6 s, plus evaluation and save).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path

import torch
from transformers import AutoTokenizer, Trainer, TrainingArguments
from transformers.models.bert.modeling_bert import BertPooler

from hf_ffn import FfnBertModel
from hf_ffn.finetune.arguments import ClassificationDataArguments
from hf_ffn.finetune.classification import run_classification
from hf_ffn.finetune.tasks import load_stsb
from hf_ffn.parity import bundled_checkpoint
from hf_ffn.similarity import mean_pool
from hf_ffn.training.arguments import ModelArguments, bad_input_exits
from studies.common.environment import machine, portable_command, portable_path, versions

HEAD_PREFIX = re.compile(r"^(bert|roberta|electra)\.")  # a head model's base-model prefix
# `--freeze`: which parameters (in-memory names) stay fixed in fine-tuning
FROZEN = {
    "ffn": lambda name: ".mlp." in name,  # gate_proj, up_proj, down_proj (not mlp_norm)
    "attention": lambda name: ".attention." in name and "LayerNorm" not in name,  # query, key, value, output.dense
    "norms": lambda name: any(norm in name for norm in ("LayerNorm", "mlp_norm", "final_norm")),  # every LayerNorm
    "encoder": lambda name: ".encoder." in name or ".embeddings." in name,  # all but the pooler and the head
}
FROZEN_TEXT = {
    "ffn": ", FFN projections frozen",
    "attention": ", attention projections frozen",
    "norms": ", LayerNorms frozen",
    "encoder": ", encoder and embeddings frozen (the pooler and the head train)",
}
TABLE_WARMUP_STEPS = 36  # the four-task table's warm-up on STS-B: 10% of one epoch at batch 16 (360 steps)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", default=None, help="the first model (default: the bundled all-MiniLM-L6-v2)")
    parser.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="NAME=FOLDER",
        help="a model folder to fine-tune after the baseline (repeatable)",
    )
    parser.add_argument("--data_dir", default="../shared/data/stsb", help="the STS-B folder (default: %(default)s)")
    parser.add_argument("--output_dir", default="out/finetune_collapse", help="(default: %(default)s)")
    parser.add_argument(
        "--steps",
        type=int,
        default=100,
        help=f"optimizer steps; the first min({TABLE_WARMUP_STEPS}, steps) warm up from learning rate "
        f"0 (default: %(default)s)",
    )
    parser.add_argument("--learning_rate", type=float, default=1e-4, help="(default: %(default)s, the table's)")
    parser.add_argument(
        "--dropout",
        type=float,
        default=None,
        help="fine-tune with this hidden and attention dropout (default: each folder's own)",
    )
    parser.add_argument(
        "--pooling",
        choices=("cls", "mean"),
        default="cls",
        help="what the regression head's pooler reads: cls (BertPooler, the table's) or mean (the mean over real "
        "tokens, as the teacher was trained; padded execution) (default: %(default)s)",
    )
    parser.add_argument(
        "--freeze",
        choices=tuple(FROZEN),
        default=None,
        help="fine-tune with these frozen: ffn (gate, up, down projections) or attention (query, key, value, output "
        "projections), the LayerNorms training; norms (every LayerNorm, the embeddings' included); or encoder "
        "(everything but the pooler and the regression head)",
    )
    parser.add_argument(
        "--pairs", type=int, default=256, help="validation pairs the encoder is measured on (default: %(default)s)"
    )
    parser.add_argument("--seed", type=int, default=0, help="(default: %(default)s)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = parser.parse_args(argv)
    for flag, value, least in (("--steps", args.steps, 1), ("--pairs", args.pairs, 2), ("--threads", args.threads, 0)):
        if value < least:  # spread is a standard deviation over the pairs: it needs two
            raise ValueError(f"{flag} must be at least {least}, got {value}")
    if args.dropout is not None and not 0.0 <= args.dropout < 1.0:
        raise ValueError(f"--dropout must be in [0, 1), got {args.dropout}")
    if args.baseline is not None and not (Path(args.baseline) / "config.json").is_file():
        raise ValueError(f"--baseline {args.baseline!r}: expected a checkpoint folder (holding config.json)")
    args.models = {"baseline": args.baseline or bundled_checkpoint()}
    for item in args.model:
        name, _, folder = item.partition("=")
        if not name or not folder:
            raise ValueError(f"--model {item!r}: expected NAME=FOLDER")
        if name in args.models:
            raise ValueError(
                f"--model {item!r}: the name {name!r} is already taken ({', '.join(args.models)}); "
                f"give each model its own NAME"
            )
        if not (Path(folder) / "config.json").is_file():
            raise ValueError(f"--model {item!r}: {folder!r} is not a checkpoint folder (no config.json)")
        args.models[name] = folder
    return args


def spread(vectors: torch.Tensor) -> float:
    """(inputs, hidden) → the standard deviation over inputs (unbiased) of each dimension, averaged over
    dimensions, divided by the mean Euclidean norm of the vectors: 0 when every input gives the same vector."""
    return (vectors.std(0).mean() / vectors.norm(dim=-1).mean()).item()


@torch.no_grad()
def measure(folder: str, tokenizer, pairs) -> dict:
    """The encoder of `folder` on STS-B `pairs` (a `read_stsb` dataset): `spread` of the last hidden state at [CLS]
    and mean-pooled over real tokens, and per layer the mean norm at [CLS] of the attention and FFN sublayer
    outputs ({"attention 0": ..., "ffn 0": ..., ...}); "dropout_cosine": the mean cosine similarity at real tokens
    between the last hidden state with the config's dropout on (train mode, seed 0) and off: how much of the
    representation survives the noise fine-tuning trains under."""
    # padded execution: the hooks read [CLS] as column 0 of (pairs, seq, hidden) outputs, which a folder saved with
    # `unpad_tokens=True` would hand them packed as (n_real, hidden)
    model = FfnBertModel.from_pretrained(folder, unpad_tokens=False).eval()
    batch = tokenizer(
        pairs["sentence1"], pairs["sentence2"], padding=True, truncation=True, max_length=128, return_tensors="pt"
    )
    norms: dict[str, float] = {}
    hooks = []
    for i, layer in enumerate(model.encoder.layer):
        for name, module in ((f"attention {i}", layer.attention.output.dense), (f"ffn {i}", layer.mlp)):
            hooks.append(
                module.register_forward_hook(
                    lambda _m, _in, out, name=name: norms.__setitem__(name, out[:, 0].norm(dim=-1).mean().item())
                )
            )
    hidden = model(**batch).last_hidden_state  # (pairs, seq, hidden)
    for hook in hooks:
        hook.remove()

    model.train()  # dropout on, as in fine-tuning
    torch.manual_seed(0)
    noisy = model(**batch).last_hidden_state
    real = batch["attention_mask"].bool()
    return {
        "spread_cls": spread(hidden[:, 0]),
        "spread_mean": spread(mean_pool(hidden, batch["attention_mask"])),
        "dropout_cosine": torch.nn.functional.cosine_similarity(hidden[real], noisy[real], dim=-1).mean().item(),
        "cls_norms": norms,
    }


def weight_group(key: str) -> str | None:
    """The group a checkpoint key (BERT's on-disk names, any head prefix) is counted in: "embeddings", "attention i"
    (query, key, value and output projections of layer i), "attention norm i", "ffn i" (up, gate and down
    projections), "ffn norm i", "final norm", "pooler"; None for a head's own weights."""
    key = HEAD_PREFIX.sub("", key)
    layer = re.match(r"encoder\.layer\.(\d+)\.(.*)", key)
    if layer is None:
        for prefix, group in (
            ("embeddings.", "embeddings"),
            ("encoder.final_norm.", "final norm"),
            ("pooler.", "pooler"),
        ):
            if key.startswith(prefix):
                return group
        return None
    i, rest = layer.groups()
    if rest.startswith("attention.output.LayerNorm."):
        return f"attention norm {i}"
    if rest.startswith("attention."):
        return f"attention {i}"
    if rest.startswith(("intermediate.", "output.dense.", "mlp.")):
        return f"ffn {i}"
    return f"ffn norm {i}" if rest.startswith(("output.LayerNorm.", "mlp_norm.")) else None


def weight_change(start: str | Path, tuned: str | Path) -> dict[str, float]:
    """Per `weight_group`, the relative change fine-tuning made: ‖W_after − W_before‖ / ‖W_before‖ (Frobenius, over
    the group's tensors together), on the weights both folders' `model.safetensors` hold (no unit; 0: unchanged)."""
    from safetensors.torch import load_file

    def weights(folder) -> dict[str, torch.Tensor]:  # keyed without the head's prefix
        return {HEAD_PREFIX.sub("", k): v for k, v in load_file(Path(folder) / "model.safetensors").items()}

    before, after = weights(start), weights(tuned)
    sums: dict[str, list[float]] = {}
    for key in before.keys() & after.keys():
        group = weight_group(key)
        if group is not None:
            delta, base = sums.setdefault(group, [0.0, 0.0]), before[key].double()
            delta[0] += (after[key].double() - base).pow(2).sum().item()
            delta[1] += base.pow(2).sum().item()
    return {group: (d / b) ** 0.5 for group, (d, b) in sums.items() if b > 0}


@contextlib.contextmanager
def mean_pooled_head():
    """For the block, `BertPooler` (dense + tanh) reads the mean of the last hidden state over real tokens (the
    `attention_mask` of the enclosing `FfnBertModel` call) instead of [CLS]: the sentence-transformers pooling the
    teacher was trained with. Needs padded execution ((batch, seq, hidden) outputs; RuntimeError otherwise)."""
    masks: list[torch.Tensor] = []
    forward, pooler_forward = FfnBertModel.forward, BertPooler.forward

    def model_forward(self, *args, **kwargs):
        masks[:] = [kwargs["attention_mask"]]
        return forward(self, *args, **kwargs)

    def pool(self, hidden_states: torch.Tensor) -> torch.Tensor:
        if hidden_states.shape[:2] != masks[0].shape:
            raise RuntimeError(f"mean pooling needs padded outputs, got {tuple(hidden_states.shape)}")
        return self.activation(self.dense(mean_pool(hidden_states, masks[0])))

    FfnBertModel.forward, BertPooler.forward = model_forward, pool
    try:
        yield
    finally:
        FfnBertModel.forward, BertPooler.forward = forward, pooler_forward


@contextlib.contextmanager
def frozen(part: str):
    """For the block, every `Trainer` sets `requires_grad=False` on `part`'s parameters (`FROZEN`: in-memory names)
    before it builds its optimizer, so they never move."""
    create, inside = Trainer.create_optimizer, FROZEN[part]

    def create_optimizer(self, model=None):
        for name, parameter in (model or self.model).named_parameters():
            if inside(name):
                parameter.requires_grad_(False)
        return create(self, model) if model is not None else create(self)

    Trainer.create_optimizer = create_optimizer
    try:
        yield
    finally:
        Trainer.create_optimizer = create


def with_dropout(folder: str, dropout: float, work_dir: Path) -> str:
    """A copy of `folder` whose config sets both dropout probabilities to `dropout`."""
    copy = work_dir / "start"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(folder, copy)
    config = json.loads((copy / "config.json").read_text())
    config.update(hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    (copy / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return str(copy)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    pairs = load_stsb(args.data_dir)["validation"][: args.pairs]  # checks --data_dir before any work
    output = Path(args.output_dir)
    output.mkdir(parents=True, exist_ok=True)
    settings = {k: v for k, v in vars(args).items() if k != "models"}  # paths as a reader writes them
    settings.update(
        baseline=args.baseline and portable_path(args.baseline),
        data_dir=portable_path(args.data_dir),
        output_dir=portable_path(args.output_dir),
        model=[f"{n}={portable_path(f)}" for n, f in (m.partition("=")[::2] for m in args.model)],
    )
    results = {
        "settings": settings,
        "models": {},
        "machine": machine(),
        "versions": versions(),
        "load_before": os.getloadavg()[0],
    }
    for name, folder in args.models.items():
        print(f"=== {name} ({time.strftime('%H:%M:%S')}) ===", flush=True)
        work_dir = output / name
        shutil.rmtree(work_dir, ignore_errors=True)
        work_dir.mkdir(parents=True)
        start = with_dropout(folder, args.dropout, work_dir) if args.dropout is not None else folder
        tokenizer = AutoTokenizer.from_pretrained(folder)
        training_args = TrainingArguments(
            output_dir=str(work_dir / "fine-tuned"),
            seed=args.seed,
            max_steps=args.steps,
            per_device_train_batch_size=16,
            per_device_eval_batch_size=64,
            train_sampling_strategy="group_by_length",
            learning_rate=args.learning_rate,
            lr_scheduler_type="constant_with_warmup",
            warmup_steps=min(TABLE_WARMUP_STEPS, args.steps),
            save_strategy="no",
            report_to="none",
            disable_tqdm=True,
            logging_steps=max(1, args.steps // 5),
        )
        data_args = ClassificationDataArguments(task="stsb", data_dir=args.data_dir, max_seq_length=128)
        mean = args.pooling == "mean"
        with (
            mean_pooled_head() if mean else contextlib.nullcontext(),
            frozen(args.freeze) if args.freeze else contextlib.nullcontext(),
        ):
            model_args = ModelArguments(model_name_or_path=start, unpad_tokens=not mean)
            outcome = run_classification(model_args, data_args, training_args)
        results["models"][name] = {
            "before": measure(start, tokenizer, pairs),
            "after": measure(str(work_dir / "fine-tuned"), tokenizer, pairs),
            "pearson": 100 * outcome["results"]["eval_pearson"],
            "spearman": 100 * outcome["results"]["eval_spearman"],
            "weight_change": weight_change(start, work_dir / "fine-tuned"),
        }
        shutil.rmtree(work_dir, ignore_errors=True)  # the fine-tuned weights are not kept
    results["load_after"] = os.getloadavg()[0]
    (output / "collapse.json").write_text(json.dumps(results, indent=1) + "\n")
    (output / "collapse.md").write_text(report(results, argv if argv is not None else sys.argv[1:]))
    print((output / "collapse.md").read_text())
    return 0


def report(results: dict, argv: list[str]) -> str:
    settings = results["settings"]
    dropout = "each folder's own" if settings["dropout"] is None else settings["dropout"]
    lines = [
        f"# Representation after {settings['steps']} STS-B fine-tuning steps",
        "",
        f"Learning rate {settings['learning_rate']} (warm-up {min(TABLE_WARMUP_STEPS, settings['steps'])} steps, then "
        f"constant), batch 16, dropout {dropout}, pooler reading {settings.get('pooling', 'cls')}"
        f"{FROZEN_TEXT.get(settings.get('freeze'), '')}, "
        f"seed {settings['seed']}; spread on the first {settings['pairs']} "
        "validation pairs (std over pairs / mean norm; 0: every input gives the same vector); Pearson on the whole "
        "validation set; dropout cosine: the cosine similarity at real tokens between the last hidden state with "
        "the config's dropout on and off (1: dropout changes nothing).",
        "",
        "| model | dropout cosine before | spread [CLS] before → after | spread mean-pooled before → after | "
        "validation Pearson ×100 |",
        "|---|---|---|---|---|",
    ]
    for name, m in results["models"].items():
        b, a = m["before"], m["after"]
        lines.append(
            f"| {name} | {b['dropout_cosine']:.4f} | {b['spread_cls']:.4f} → {a['spread_cls']:.4f} | "
            f"{b['spread_mean']:.4f} → {a['spread_mean']:.4f} | {m['pearson']:.1f} |"
        )
    # every model's layers (models of other depths leave the cells they lack empty), in layer order
    columns = list(dict.fromkeys(k for m in results["models"].values() for k in m["before"]["cls_norms"]))
    columns.sort(key=lambda k: int(k.split()[1]))  # stable: attention before ffn within a layer

    def table(title: str, columns: list[str], cell) -> list[str]:  # one row per model, `cell(model, column)`
        rows = [
            f"| {name} | " + " | ".join(cell(m, k) for k in columns) + " |" for name, m in results["models"].items()
        ]
        return ["", title, "", "| model | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns), *rows]

    lines += table(
        "Norm of each sublayer's output at [CLS] (before the residual add), before → after:",
        columns,
        lambda m, k: (
            f"{m['before']['cls_norms'][k]:.1f} → {m['after']['cls_norms'][k]:.1f}"
            if k in m["before"]["cls_norms"]
            else ""
        ),
    )
    changed = [m.get("weight_change") for m in results["models"].values()]
    if all(changed):  # records made before the measure have none
        groups = sorted(
            dict.fromkeys(k for c in changed for k in c),
            key=lambda k: (int(k.split()[-1]) if k.split()[-1].isdigit() else -1 if k == "embeddings" else 99, k),
        )
        lines += table(
            "Relative weight change by fine-tuning, ‖W_after − W_before‖ / ‖W_before‖ per group:",
            groups,
            lambda m, g: f"{m['weight_change'][g]:.4f}" if g in m["weight_change"] else "",
        )
    lines += [
        "",
        f"Machine: {results['machine']['cpu']}, {results['machine']['cores']} cores, load average "
        f"{results['load_before']:.2f} → {results['load_after']:.2f}; {results['versions']}.",
        "",
        "Command: `" + portable_command(["python", "-m", "studies.finetune_collapse.finetune_collapse", *argv]) + "`",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    with bad_input_exits("finetune_collapse.py"):  # a one-line message, not a traceback
        sys.exit(main())
