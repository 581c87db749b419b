"""Initialisation for fair comparisons of FFN variants trained from scratch.

- `seed_by_name`: every module's initial weights depend only on (seed, module name), so two variants built with
  one seed (GELU and SwiGLU, Post-LN and Pre-LN) start from the same embeddings, attention, LayerNorms and MLM
  head; only the modules whose names or shapes differ (the FFNs) differ. Built the ordinary way (one global RNG
  stream over the modules in construction order) a GELU and a SwiGLU model of one seed share no weight after the
  first FFN, because the gated FFN draws one more matrix.
- `ffn_output_rms`: each layer's FFN output size at initialisation on real input.

How BERT's initialisation treats a gated FFN. `_init_weights` draws every `nn.Linear` weight from
N(0, σ²) (σ = `initializer_range`, 0.02) with zero bias, the gate and linear branches of a GLU included. On an input
x with rms 1 per feature (after a LayerNorm) a projection `W x` has entries of std s = σ·√d (d = hidden size; 0.23
at d = 128). A standard FFN's output `W2 act(W1 x)` is first order in s (GELU(z) ≈ z/2 near 0): rms ≈ σ·√I·s/2 —
about 0.05 at d = 128, I = 512. A gated FFN's `W2 (act(W_g x) ⊙ W_u x)` is a product of two such projections,
second order in s (SiLU(z) ≈ z/2): rms ≈ σ·√I'·s²/2 — about 0.01 at I' = 344. The gated branch therefore starts
about 1/s · √(I/I') ≈ 5× smaller at this size (the factor is 1/(σ√d): smaller at larger hidden sizes, e.g. 1.8×
at d = 768), and under one learning rate for all variants its update starts relatively larger. Compare variants each
at its own best learning rate, and report these numbers beside the result.
"""

from __future__ import annotations

import hashlib

import torch
from torch import nn


def name_seed(seed: int, name: str) -> int:
    """A stable 63-bit seed for the module `name` under `seed` (SHA-256 of "seed:name"; Python's `hash` of a
    string differs between processes)."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{name}".encode()).digest()[:8], "little") >> 1


def seed_by_name(model: nn.Module, seed: int) -> nn.Module:
    """Initialise `model` (a transformers `PreTrainedModel`, e.g. `FfnBertForMaskedLM`) again, module by module,
    each with the model's own `_init_weights` under torch's CPU generator seeded with `name_seed(seed, name)`: the
    initial weights of a module depend only on the seed, its name and its shape. Tied weights (the MLM decoder and
    the word embeddings) keep the draw of the module met first (`named_modules` order). The global RNG state is
    restored afterwards. In place; returns `model`.

    Call it on the model as built, on the CPU (a CUDA tensor would draw from the CUDA generator).
    """
    initialised: set[int] = set()
    for name, module in model.named_modules():
        tensors = [*module.parameters(recurse=False), *module.buffers(recurse=False)]
        if not tensors:
            continue
        tied = {id(t): t.detach().clone() for t in tensors if id(t) in initialised}
        flags = [(t, getattr(t, "_is_hf_initialized", None)) for t in tensors]
        for tensor, _ in flags:  # transformers' init functions skip tensors flagged as loaded
            tensor._is_hf_initialized = False
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(name_seed(seed, name))
            model._init_weights(module)
        with torch.no_grad():
            for tensor in tensors:
                if id(tensor) in tied:
                    tensor.copy_(tied[id(tensor)])
        for tensor, flag in flags:
            tensor._is_hf_initialized = flag
        initialised |= {id(t) for t in tensors}
    return model


@torch.no_grad()
def ffn_output_rms(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> list:
    """The root mean square of each encoder layer's FFN output (`layer.mlp`, before dropout and residual) on
    `input_ids` (batch, seq) (`attention_mask` (batch, seq): only its 1 positions counted), in evaluation mode.

    Returns:
        One float per layer (the rms over the counted tokens and the hidden features).
    """
    encoder = model.base_model.encoder
    outputs: list[torch.Tensor] = []
    hooks = [layer.mlp.register_forward_hook(lambda m, i, o: outputs.append(o)) for layer in encoder.layer]
    training = model.training
    model.eval()
    try:
        model(input_ids=input_ids, attention_mask=attention_mask)
    finally:
        for hook in hooks:
            hook.remove()
        model.train(training)
    keep = torch.ones_like(input_ids, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
    return [float(out[keep].float().pow(2).mean().sqrt()) for out in outputs]


__all__ = ["ffn_output_rms", "name_seed", "seed_by_name"]
