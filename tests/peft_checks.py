"""The LoRA checks every family's tests run (tests/test_roberta_commands.py, tests/test_electra_workflow.py): the
adapters wrap BERT's target names, train alone, save and reload bit for bit; a query/value adapter of a default-config
model loads on upstream's class to the same logits."""

import json

import pytest
import torch
from torch import nn

from hf_ffn.logging_utils import quiet_transformers

TARGETS = ["query", "value", "gate_proj", "up_proj", "down_proj"]


def check_lora_trains_saves_and_loads(model_class, base_folder, batch: dict, prefix: str, tmp_path) -> nn.Module:
    """LoRA on `model_class` loaded from `base_folder` (2 layers): exactly query/value and the FFN's projections
    wrapped, 5 SGD steps lower the loss and leave every frozen weight unchanged, the saved adapter reloads to
    `torch.equal` logits and merges within fp32 rounding. `prefix`: the base model's attribute (`roberta`, ...).
    Returns the trained PEFT model (for family-specific checks)."""
    peft = pytest.importorskip("peft")
    from peft.tuners.lora import Linear as LoraLinear

    with quiet_transformers():
        base = model_class.from_pretrained(base_folder)
    model = peft.get_peft_model(base, peft.LoraConfig(r=4, lora_alpha=8, target_modules=TARGETS, task_type="SEQ_CLS"))
    wrapped = sorted(name for name, module in model.named_modules() if isinstance(module, LoraLinear))
    layer = f"base_model.model.{prefix}.encoder.layer"
    assert wrapped == sorted(
        [f"{layer}.{i}.attention.self.{t}" for i in range(2) for t in ("query", "value")]
        + [f"{layer}.{i}.mlp.{t}" for i in range(2) for t in ("gate_proj", "up_proj", "down_proj")]
    )
    frozen = {name: p.detach().clone() for name, p in model.named_parameters() if not p.requires_grad}
    labels = torch.tensor([0, 1, 0])
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.5)
    model.train()
    losses = []
    for _ in range(5):
        loss = model(**batch, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < losses[0], losses
    # the classifier is PEFT's modules_to_save for SEQ_CLS (trained copy); every other base weight is unchanged
    assert all(torch.equal(p, frozen[name]) for name, p in model.named_parameters() if name in frozen)
    assert any(not torch.equal(p, torch.zeros_like(p)) for n, p in model.named_parameters() if "lora_B" in n)
    model.eval()
    with torch.no_grad():
        adapted = model(**batch).logits
    model.save_pretrained(tmp_path / "adapter")
    saved = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert sorted(saved["target_modules"]) == sorted(TARGETS)
    with quiet_transformers():
        fresh = model_class.from_pretrained(base_folder)
    loaded = peft.PeftModel.from_pretrained(fresh, tmp_path / "adapter").eval()
    with torch.no_grad():
        assert torch.equal(loaded(**batch).logits, adapted)
        merged = loaded.merge_and_unload()
        assert type(merged) is model_class
        assert type(getattr(merged, prefix).encoder.layer[0].mlp.gate_proj) is nn.Linear
        # merged W + s·BA against W x + s·B(A x): same maths, other fp32 rounding
        torch.testing.assert_close(merged(**batch).logits, adapted, rtol=1e-5, atol=1e-5)
    return model


def check_lora_adapter_loads_on_upstream(model_class, upstream_class, base_folder, batch: dict, tmp_path) -> None:
    """A query/value adapter (B drawn ≠ 0, as trained) on a default-config `model_class` from `base_folder` loads on
    `upstream_class` (same folder) to bit-identical logits, and it is active: it moves the encoder's output."""
    peft = pytest.importorskip("peft")

    with quiet_transformers():
        base = model_class.from_pretrained(base_folder)
    lora = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["query", "value"], task_type="SEQ_CLS")
    model = peft.get_peft_model(base, lora)
    for name, p in model.named_parameters():  # a trained adapter: B ≠ 0
        if "lora_B" in name:
            nn.init.normal_(p, std=2.0)
    model.save_pretrained(tmp_path / "adapter")
    with quiet_transformers():
        upstream = upstream_class.from_pretrained(base_folder)
        plain = model_class.from_pretrained(base_folder).eval()
    theirs = peft.PeftModel.from_pretrained(upstream, tmp_path / "adapter").eval()
    with torch.no_grad():
        ours = model.eval()(**batch, output_hidden_states=True)
        assert torch.equal(theirs(**batch).logits, ours.logits)
        plain = plain(**batch, output_hidden_states=True)
    moved, scale = (ours.hidden_states[-1] - plain.hidden_states[-1]).abs().max(), plain.hidden_states[-1].abs().max()
    assert moved > 0.1 * scale and not torch.equal(ours.logits, plain.logits), (moved, scale)
