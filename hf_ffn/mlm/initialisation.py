"""Initialisation for fair comparisons of FFN variants from scratch (docs/pretraining.md, "Fair starts"):
`seed_by_name` (each module's initial weights depend only on (seed, name), so the variants of one seed share every
weight outside the FFN) and `ffn_output_rms` (each layer's FFN output size at initialisation).

BERT's `_init_weights` draws every `nn.Linear` weight from N(0, σ²) (σ = 0.02), a GLU's gate and linear branches
included. On an input with rms 1 per feature a projection has entries of std s = σ·√d (0.23 at d = 128). A standard
FFN's output `W2 act(W1 x)` is first order in s (GELU(z) ≈ z/2): rms ≈ σ·√I·s/2, about 0.05 at I = 512; a gated
FFN's `W2 (act(W_g x) ⊙ W_u x)` is second order (SiLU(z) ≈ z/2): rms ≈ σ·√I'·s²/2, about 0.01 at I' = 344. The gated
FFN starts about (1/s)·√(I/I') ≈ 5× smaller here (1.8× at d = 768): compare variants each at its own learning rate.
"""

from __future__ import annotations

import hashlib

import torch
from torch import nn


def name_seed(seed: int, name: str) -> int:
    """A stable 63-bit seed for the module `name` under `seed` (SHA-256: Python's `hash` differs between processes)."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{name}".encode()).digest()[:8], "little") >> 1


def seed_by_name(model: nn.Module, seed: int) -> nn.Module:
    """Initialise `model` (a `PreTrainedModel`, on the CPU) again in place, each module with `_init_weights` under
    torch's generator seeded with `name_seed(seed, name)`; tied weights keep the first module's draw, the global RNG
    state is restored. Returns `model`.
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
    """The root mean square of each encoder layer's FFN output (`layer.mlp`) on `input_ids` (batch, seq) in
    evaluation mode, over the tokens (only `attention_mask`'s 1 positions) and features: one float per layer."""
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
