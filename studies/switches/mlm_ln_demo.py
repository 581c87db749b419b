"""A short MLM run from scratch, Post-LN vs Pre-LN, fixed learning rate and no warm-up (Trainer).

    python -m studies.switches.mlm_ln_demo --data ../shared/data/state_union --threads 1   # writes out/mlm_ln_demo.png

(`--output-dir studies/switches/figures` regenerates the published figure.)

Both models share everything but `layer_norm_position`: config, seed (initial weights, data order, masks), the
tokenizer (BERT's WordPiece trained on the text), AdamW at a constant learning rate from step 0, trained
through the library's MLM path (`hf_ffn.mlm.trainer.mlm_trainer`; held-out blocks masked once). The last
`--eval-documents` documents (the latest speeches) are held out. Prints the losses; writes one PNG with the
training and held-out MLM loss curves. Needs the `train` and `plots` extras.
"""

from __future__ import annotations

import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from hf_ffn.training.blocks import mlm_blocks
from studies.switches.layer_norm_study import (  # noqa: E402
    mlm_config,
    parse_study,
    split_documents,
    study_parser,
    train_mlm,
    train_tokenizer,
    uniform_loss,
    unigram_entropy,
)


def main() -> None:
    parser = study_parser(
        __doc__.splitlines()[0], "mlm_ln_demo.png", hidden_size=64, heads=4, seq_len=64, batch_size=16, vocab_size=2048
    )
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--max-steps", type=int, default=250)
    parser.add_argument("--learning-rate", type=float, default=3e-3)
    parser.add_argument("--eval-steps", type=int, default=50)
    parser.add_argument("--eval-documents", type=int, default=4)
    parser.add_argument("--max-eval-blocks", type=int, default=64)
    args, documents = parse_study(parser)
    train_docs, eval_docs = split_documents(documents, args.eval_documents)
    tokenizer = train_tokenizer(train_docs, args.vocab_size)
    train_blocks = mlm_blocks(train_docs, tokenizer, args.seq_len)
    eval_blocks = mlm_blocks(eval_docs, tokenizer, args.seq_len)
    eval_blocks = eval_blocks.select(range(min(args.max_eval_blocks, len(eval_blocks))))
    unigram = unigram_entropy(train_blocks["input_ids"], set(tokenizer.all_special_ids))
    print(
        f"{len(train_blocks)} training blocks, {len(eval_blocks)} held-out blocks of {args.seq_len} tokens; "
        f"uniform loss ln V = {uniform_loss(tokenizer.vocab_size):.3f}, unigram entropy = {unigram:.3f} nats"
    )
    sizes = dict(
        num_hidden_layers=args.layers,
        hidden_size=args.hidden_size,
        num_attention_heads=args.heads,
        intermediate_size=4 * args.hidden_size,
        max_position_embeddings=args.seq_len,
    )

    fig, ax = plt.subplots(figsize=(7.5, 4.5), constrained_layout=True)
    for placement, color in (("post", "tab:blue"), ("pre", "tab:orange")):
        start = time.perf_counter()
        history = train_mlm(
            mlm_config(tokenizer.vocab_size, placement, **sizes),
            tokenizer,
            train_blocks,
            eval_blocks,
            max_steps=args.max_steps,
            learning_rate=args.learning_rate,
            batch_size=args.batch_size,
            eval_steps=args.eval_steps,
            seed=args.seed,
        )
        seconds = time.perf_counter() - start
        evals = ", ".join(f"{step}: {loss:.3f}" for step, loss in history["eval"])
        print(
            f"{placement}-LN ({seconds:.0f} s): held-out loss by step {{{evals}}}; last train loss "
            f"{history['train'][-1][1]:.3f}",
            flush=True,
        )
        label = f"{placement.capitalize()}-LN"
        ax.plot(*zip(*history["train"], strict=False), color=color, lw=1, alpha=0.6, label=f"{label} train")
        ax.plot(
            *zip(*history["eval"], strict=False),
            "o-",
            color=color,
            lw=2,
            ms=4,
            label=f"{label} held-out (final {history['eval'][-1][1]:.2f})",
        )
    ax.axhline(unigram, color="grey", ls="--", lw=1, label=f"unigram entropy {unigram:.2f}")
    ax.set_xlabel("training step")
    ax.set_ylabel("MLM loss (nats)")
    ax.set_title(
        f"MLM from scratch on {Path(args.data).name}: {args.layers} layers, hidden {args.hidden_size}, "
        f"AdamW lr {args.learning_rate:g} constant, no warm-up, batch {args.batch_size}×{args.seq_len}",
        fontsize=9,
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    args.output_dir.mkdir(parents=True, exist_ok=True)
    path = args.output_dir / "mlm_ln_demo.png"
    fig.savefig(path, dpi=100)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
