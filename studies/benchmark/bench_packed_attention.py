"""How to compute attention on packed sequences on the CPU: the candidates timed side by side.

    python -m studies.benchmark.bench_packed_attention [--threads 1] [--repeats 12]   # about a minute

Q/K/V of one all-MiniLM-L6-v2 attention layer (12 heads × 32) for the real tokens of the unpadded benchmark's
shuffled rt_polarity batches (4 × 32 sentences, `studies.benchmark.unpadded_benchmark.make_batches`), through
transformers' eager and sdpa attention functions (`ALL_ATTENTION_FUNCTIONS`), forward only, interleaved rounds on
the process CPU clock. Candidates: *re-padded* (Q/K/V scattered into (batch, heads, seq, head_dim) zeros with
upstream's padding mask: what `unpad_tokens` did before packed attention), *length buckets* (one call per distinct
length on a (sequences, heads, length, head_dim) view, no mask: `hf_ffn.unpadding.packed_self_attention`), *per
sequence* (one call per sequence), *block-diagonal mask* (all n_real tokens as one sequence, other sequences masked)
and, for sdpa, *nested jagged* (torch.nested `jagged` tensors through `scaled_dot_product_attention`). Prints the
median ms per batch and the ratio to re-padded.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import replace

import torch
from transformers import AutoTokenizer, BertConfig
from transformers.masking_utils import create_bidirectional_mask
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.models.bert.modeling_bert import BertSelfAttention, eager_attention_forward

from hf_ffn.parity import bundled_checkpoint
from hf_ffn.unpadding import TokenPacking
from studies.benchmark import paired_ratio, time_interleaved
from studies.benchmark.unpadded_benchmark import FULL, make_batches, read_sentences


def candidates(module: BertSelfAttention, mask: torch.Tensor, attn: str) -> dict:
    """name → a call computing attention for the batch of `mask` (batch, seq) from packed Q/K/V."""
    batch, seq = mask.shape
    packing = TokenPacking.from_attention_mask(mask)
    n, heads, dim = packing.num_real, module.num_attention_heads, module.attention_head_size
    q, k, v = (torch.randn(n, heads, dim) for _ in range(3))
    fn = ALL_ATTENTION_FUNCTIONS.get_interface(attn, eager_attention_forward)
    module.config._attn_implementation = attn
    padded_mask = create_bidirectional_mask(
        config=module.config, inputs_embeds=torch.zeros(batch, seq, 1), attention_mask=mask
    )

    def call(a, b, c, m):
        return fn(module, a, b, c, m, dropout=0.0, scaling=module.scaling)[0]

    def repadded():
        heads_first = [packing.pad(x.reshape(n, -1)).view(batch, seq, heads, dim).transpose(1, 2) for x in (q, k, v)]
        return packing.unpad(call(*heads_first, padded_mask).reshape(batch, seq, -1))

    def buckets():
        out, start = [], 0
        for length, count in packing.buckets:
            rows = slice(start, start + length * count)
            start = rows.stop
            views = [x[rows].view(count, length, heads, dim).transpose(1, 2) for x in (q, k, v)]
            out.append(call(*views, None).reshape(length * count, -1))
        return torch.cat(out)

    bounds = packing.cu_seqlens.tolist()

    def per_sequence():
        return torch.cat(
            [
                call(*(x[a:b].transpose(0, 1)[None] for x in (q, k, v)), None)[0].reshape(b - a, -1)
                for a, b in zip(bounds[:-1], bounds[1:], strict=False)
            ]
        )

    sequence = torch.repeat_interleave(torch.arange(len(bounds) - 1), packing.cu_seqlens.diff())
    allowed = (sequence[:, None] == sequence[None, :])[None, None]
    block_mask = allowed if attn == "sdpa" else torch.zeros(allowed.shape).masked_fill(~allowed, torch.finfo().min)

    def block_diagonal():
        return call(*(x.transpose(0, 1)[None] for x in (q, k, v)), block_mask)[0].reshape(n, -1)

    result = {
        "re-padded": repadded,
        "length buckets": buckets,
        "per sequence": per_sequence,
        "block-diagonal mask": block_diagonal,
    }
    if attn == "sdpa":

        def nested():
            parts = [
                torch.nested.nested_tensor(
                    [x[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=False)], layout=torch.jagged
                ).transpose(1, 2)
                for x in (q, k, v)
            ]
            return torch.nn.functional.scaled_dot_product_attention(*parts, scale=module.scaling)

        result["nested jagged"] = nested
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=12)
    parser.add_argument("--rt-polarity-dir", default="../shared/data/rt_polarity")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(bundled_checkpoint())
    texts, labels = read_sentences(args.rt_polarity_dir)
    batches = make_batches(tokenizer, texts, labels, replace(FULL, batches=4))["shuffled"]
    module = BertSelfAttention(BertConfig(hidden_size=384, num_attention_heads=12)).eval()
    print(
        f"{torch.get_num_threads()} threads, process CPU clock, {args.repeats} rounds; shapes "
        f"{[tuple(b['input_ids'].shape) for b in batches]}"
    )
    for attn in ("eager", "sdpa"):
        calls = [candidates(module, b["attention_mask"], attn) for b in batches]
        fns = {name: (lambda name=name, calls=calls: [c[name]() for c in calls]) for name in calls[0]}
        with torch.no_grad():
            times = time_interleaved(fns, args.repeats, 1, "cpu")
        for name, t in times.items():
            ratio = paired_ratio(t, times["re-padded"])
            print(
                f"  {attn:<5} {name:<20} {statistics.median(t) / len(batches) * 1e3:8.2f} ms/batch  "
                f"×{ratio['ratio']:.3f} [{ratio['ratio_min']:.3f}–{ratio['ratio_max']:.3f}] of re-padded"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
