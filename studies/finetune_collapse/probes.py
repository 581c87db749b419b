"""Probes of a student's encoder that fine-tuning's collapse could come from, on STS-B validation pairs encoded as
BERT pairs (no training): does segment B (token type 1), never seen in healing's blocks, agree with the teacher less;
does a small random move of the weights move the output more than the teacher's; how large is the residual stream
the last LayerNorm normalises, and how much of its variance sits in a few dimensions.

    python -m studies.finetune_collapse.probes --model NAME=FOLDER ... --output studies/finetune_collapse/probes.md

- **segment cosine**: the mean cosine similarity of the student's and the teacher's last hidden states at real
  tokens of segment A, of segment B and at [CLS], with the pairs' token types, and with every token type 0;
- **perturbation 1 − cos**: every encoder weight matrix W (not embeddings, not the pooler) set to W + ε‖W‖·n/‖n‖
  (n Gaussian, seeds 0–2), the mean over seeds of 1 − the cosine at real tokens between the perturbed and the
  unperturbed last hidden state;
- **stream**: the input of the last LayerNorm (Pre-LN: `encoder.final_norm`; Post-LN: the last layer's FFN norm):
  its mean norm at [CLS] and at the other real tokens, and the mean over tokens of the share of its variance over
  features (what LayerNorm divides by) in the largest one and five dimensions.

About a minute per model here.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import AutoTokenizer

from hf_ffn import FfnBertModel
from hf_ffn.finetune.tasks import load_stsb
from hf_ffn.parity import bundled_checkpoint
from hf_ffn.training.arguments import bad_input_exits
from studies.common.environment import machine, portable_command, versions

EPSILONS = (0.003, 0.01, 0.03)


def segment_cosines(student: torch.nn.Module, teacher: torch.nn.Module, batch: dict) -> dict[str, float]:
    """The segment cosines of the module docstring: {"A", "B", "[CLS]", "A types 0", "B types 0", "[CLS] types 0"}."""
    real, types = batch["attention_mask"].bool(), batch["token_type_ids"]
    where = {"A": real & (types == 0), "B": real & (types == 1)}
    out = {}
    for suffix, token_types in (("", types), (" types 0", torch.zeros_like(types))):
        inputs = dict(batch, token_type_ids=token_types)
        cos = F.cosine_similarity(student(**inputs).last_hidden_state, teacher(**inputs).last_hidden_state, dim=-1)
        out |= {f"{name}{suffix}": cos[mask].mean().item() for name, mask in where.items()}
        out[f"[CLS]{suffix}"] = cos[:, 0].mean().item()
    return out


def perturbation(model: torch.nn.Module, batch: dict, eps: float, seeds: int = 3) -> float:
    """The perturbation 1 − cos of the module docstring at relative size `eps`; `model`'s weights are restored."""
    real = batch["attention_mask"].bool()
    base = model(**batch).last_hidden_state[real]
    state = {name: p.detach().clone() for name, p in model.named_parameters()}
    moved = [n for n, p in model.named_parameters() if p.dim() == 2 and not n.startswith(("embeddings.", "pooler."))]
    values = []
    try:
        for seed in range(seeds):
            generator = torch.Generator().manual_seed(seed)
            for name in moved:
                noise = torch.randn(state[name].shape, generator=generator)
                model.get_parameter(name).copy_(state[name] + eps * state[name].norm() * noise / noise.norm())
            values.append(1 - F.cosine_similarity(model(**batch).last_hidden_state[real], base, dim=-1).mean().item())
    finally:
        for name in moved:
            model.get_parameter(name).copy_(state[name])
    return sum(values) / len(values)


def stream(model: FfnBertModel, batch: dict) -> dict[str, float]:
    """The stream measures of the module docstring: {"norm [CLS]", "norm other", "top 1 share", "top 5 share"}
    (the shares over every real token, [CLS] included)."""
    encoder = model.encoder
    norm = encoder.final_norm if getattr(encoder, "final_norm", None) is not None else encoder.layer[-1].mlp_norm
    captured = {}
    handle = norm.register_forward_pre_hook(lambda module, args: captured.update(x=args[0]))
    try:
        model(**batch)
    finally:
        handle.remove()
    x, real = captured["x"], batch["attention_mask"].bool()
    others = real.clone()
    others[:, 0] = False
    centred = x[real] - x[real].mean(-1, keepdim=True)
    share = (centred.pow(2) / centred.pow(2).sum(-1, keepdim=True)).sort(-1, descending=True).values
    return {
        "norm [CLS]": x[:, 0].norm(dim=-1).mean().item(),
        "norm other": x[others].norm(dim=-1).mean().item(),
        "top 1 share": share[:, 0].mean().item(),
        "top 5 share": share[:, :5].sum(-1).mean().item(),
    }


@torch.no_grad()
def probe(folder: str, teacher: FfnBertModel, batch: dict) -> dict:
    model = FfnBertModel.from_pretrained(folder, unpad_tokens=False).eval()
    return {
        "segments": segment_cosines(model, teacher, batch),
        "perturbation": {str(eps): perturbation(model, batch, eps) for eps in EPSILONS},
        "stream": stream(model, batch),
    }


def report(results: dict, argv: list[str]) -> str:
    models = results["models"]
    lines = [
        f"# Probes of the encoder on {results['pairs']} STS-B validation pairs (no training)",
        "",
        "Segment cosine to the teacher (pair token types | every token type 0):",
        "",
        "| model | segment A | segment B | [CLS] | A, types 0 | B, types 0 | [CLS], types 0 |",
        "|---|---|---|---|---|---|---|",
    ]
    keys = ("A", "B", "[CLS]", "A types 0", "B types 0", "[CLS] types 0")
    lines += [f"| {n} | " + " | ".join(f"{m['segments'][k]:.4f}" for k in keys) + " |" for n, m in models.items()]
    lines += ["", "Perturbation 1 − cos (every encoder weight matrix moved by ε of its norm, 3 seeds):", ""]
    lines += ["| model | " + " | ".join(f"ε = {e}" for e in EPSILONS) + " |", "|---|" + "---|" * len(EPSILONS)]
    lines += [
        f"| {n} | " + " | ".join(f"{v:.5f}" for v in m["perturbation"].values()) + " |" for n, m in models.items()
    ]
    lines += ["", "The residual stream entering the last LayerNorm:", ""]
    lines += ["| model | norm at [CLS] | norm at other tokens | variance share, top 1 dim | top 5 dims |"]
    lines += ["|---|---|---|---|---|"]
    for name, m in models.items():
        s = m["stream"]
        lines.append(
            f"| {name} | {s['norm [CLS]']:.1f} | {s['norm other']:.1f} | {s['top 1 share']:.3f} | "
            f"{s['top 5 share']:.3f} |"
        )
    lines += [
        "",
        f"Machine: {results['machine']['cpu']}, {results['machine']['cores']} cores; {results['versions']}.",
        "",
        "Command: `" + portable_command(["python", "-m", "studies.finetune_collapse.probes", *argv]) + "`",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append", default=[], metavar="NAME=FOLDER", help="a student (repeatable)")
    parser.add_argument("--data_dir", default="../shared/data/stsb", help="the STS-B folder (default: %(default)s)")
    parser.add_argument("--pairs", type=int, default=128, help="validation pairs (default: %(default)s)")
    parser.add_argument("--output", default="out/finetune_collapse_probes.md", help="(default: %(default)s)")
    args = parser.parse_args(argv)
    argv = sys.argv[1:] if argv is None else argv
    folders = {"teacher": bundled_checkpoint()}
    for item in args.model:
        name, _, folder = item.partition("=")
        if not name or not (Path(folder) / "config.json").is_file() or name in folders:
            raise ValueError(f"--model {item!r}: expected NAME=FOLDER, a new NAME and a folder holding config.json")
        folders[name] = folder
    pairs = load_stsb(args.data_dir)["validation"][: args.pairs]
    tokenizer = AutoTokenizer.from_pretrained(folders["teacher"])
    batch = dict(tokenizer(pairs["sentence1"], pairs["sentence2"], padding=True, truncation=True, max_length=128,
                           return_tensors="pt"))  # fmt: skip
    teacher = FfnBertModel.from_pretrained(folders["teacher"], unpad_tokens=False).eval()
    results = {"pairs": args.pairs, "models": {}, "machine": machine(), "versions": versions()}
    for name, folder in folders.items():
        results["models"][name] = probe(folder, teacher, batch)
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")
    output.write_text(report(results, argv))
    print(output.read_text())
    return 0


if __name__ == "__main__":
    with bad_input_exits("probes.py"):
        sys.exit(main())
