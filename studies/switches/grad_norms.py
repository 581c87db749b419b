"""Per-layer gradient norms at initialisation, Post-LN vs Pre-LN, at several depths (Xiong et al. 2020, fig. 3).

    python -m studies.switches.grad_norms --data ../shared/data/state_union --threads 1   # writes out/grad_norms.png

(`--output-dir studies/switches/figures` regenerates the published figure.)

For each initialisation (BERT's normal(0, 0.02), and Xavier as in the paper), depth and LayerNorm placement: a
fresh FfnBertForMaskedLM (dropout off), the MLM loss on the same masked batches of real text, and
‖∂L/∂W^{2,l}‖_F (W^{2,l} = layer l's `mlp.down_proj.weight`) averaged over the batches. Prints the norms and the
last/first-layer ratios; writes one PNG (rows: initialisation; columns: each depth, then the last layer's norm
against depth as in the paper's fig. 3 c-d). Needs the `plots` extra.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from hf_ffn.modeling_ffn_bert import FfnBertForMaskedLM  # noqa: E402
from hf_ffn.training.blocks import mlm_blocks
from studies.switches.layer_norm_study import (  # noqa: E402
    ffn_gradient_norms,
    masked_batches,
    mlm_config,
    parse_study,
    study_parser,
    train_tokenizer,
    xavier_init_,
)

INITS = {"BERT init, normal(0, 0.02)": lambda model: model, "Xavier init (Xiong et al.)": xavier_init_}


def main() -> None:
    parser = study_parser(
        __doc__.splitlines()[0], "grad_norms.png", hidden_size=256, heads=4, seq_len=128, batch_size=4, vocab_size=4096
    )
    parser.add_argument("--depths", type=int, nargs="+", default=[6, 12, 24])
    parser.add_argument("--batches", type=int, default=2)
    args, documents = parse_study(parser)
    tokenizer = train_tokenizer(documents, args.vocab_size)
    blocks = mlm_blocks(documents, tokenizer, args.seq_len)
    batches = masked_batches(blocks, tokenizer, args.batch_size, args.batches, seed=args.seed)
    sizes = dict(
        hidden_size=args.hidden_size,
        num_attention_heads=args.heads,
        intermediate_size=4 * args.hidden_size,
        max_position_embeddings=args.seq_len,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )

    cols = len(args.depths) + 1  # one panel per depth, then the last layer's norm against depth
    fig, axes = plt.subplots(
        len(INITS), cols, figsize=(3.6 * cols, 3.3 * len(INITS)), constrained_layout=True, squeeze=False
    )
    ylabel = r"$\|\partial L/\partial W^{2,l}\|_F$ (FFN down_proj)"
    for row, (init_name, init) in enumerate(INITS.items()):
        last = {"post": [], "pre": []}
        for ax, depth in zip(axes[row], args.depths, strict=False):
            for placement, style in (("post", "o-"), ("pre", "s-")):
                torch.manual_seed(args.seed)  # same initial weights for both placements (Pre-LN's final norm is last)
                config = mlm_config(tokenizer.vocab_size, placement, num_hidden_layers=depth, **sizes)
                norms = ffn_gradient_norms(init(FfnBertForMaskedLM(config)), batches)
                ratio = norms[-1] / norms[0]
                last[placement].append(norms[-1])
                print(
                    f"{init_name:28s} depth {depth:2d} {placement:4s}-LN  last/first {ratio:5.2f}  "
                    f"first {norms[0]:.3f} last {norms[-1]:.3f}",
                    flush=True,
                )
                ax.plot(
                    range(1, depth + 1),
                    norms,
                    style,
                    ms=3,
                    label=f"{placement.capitalize()}-LN: last/first {ratio:.2f}",
                )
            ax.set_title(f"{init_name}\n{depth} layers", fontsize=9)
            ax.set_xlabel("layer l")
        ax = axes[row][-1]
        for placement, style in (("post", "o-"), ("pre", "s-")):
            ax.plot(args.depths, last[placement], style, ms=4, label=f"{placement.capitalize()}-LN")
        ax.set_title(f"{init_name}\nlast layer's norm vs depth L", fontsize=9)
        ax.set_xlabel("number of layers L")
        ax.set_xticks(args.depths)
        top = 1.15 * max(max(line.get_ydata()) for a in axes[row] for line in a.get_lines())
        for a in axes[row]:
            a.set_ylim(0, top)  # linear, from 0, one scale per row: "flat" and "falls" read honestly
            a.grid(alpha=0.3)
            a.legend(fontsize=7, loc="lower left")
        axes[row][0].set_ylabel(ylabel)
    fig.suptitle(
        f"Gradient norms at initialisation: MLM loss on {Path(args.data).name}, hidden {args.hidden_size}, "
        f"FFN {4 * args.hidden_size}, {args.batches}×{args.batch_size} sequences of {args.seq_len} tokens",
        fontsize=10,
    )
    args.output_dir.mkdir(parents=True, exist_ok=True)
    path = args.output_dir / "grad_norms.png"
    fig.savefig(path, dpi=100)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
