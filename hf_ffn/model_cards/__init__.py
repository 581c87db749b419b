"""Model card templates (Jinja), filled by `hf_ffn.conversion.card` (converted folders) and `hf_ffn.model_card`
(fine-tuned folders), and what both cards say of the model's family (`card_family`, `family_lines`): its name, its
upstream class, its tokenizer."""

from __future__ import annotations

from pathlib import Path

from transformers.models.auto.tokenization_auto import TOKENIZER_MAPPING_NAMES

from ..families import Family, model_type_family
from ..modeling_ffn_roberta import saved_model_type

TEMPLATES = Path(__file__).parent


def card_family(model, source: str | None = None) -> Family:
    """The family a card names: that of `source` (the checkpoint the model came from: an XLM-RoBERTa's, where the
    model's config says only RoBERTa's) when its config.json can be read and is of the model's family, else that of
    the model's config."""
    own = model_type_family(model.config.model_type) or model_type_family("bert")
    origin = model_type_family(saved_model_type(source) or "")
    return origin if origin is not None and origin.config_class is own.config_class else own


def family_lines(model, family: Family) -> dict[str, str]:
    """What a card says of `model`'s family: its name, its upstream class for this head (e.g.
    `transformers.ElectraForPreTraining`), what of upstream's the model keeps, the family's tokenizer class."""
    head = next((h for h in family.heads if h.ffn_bert is type(model)), family.heads[0])
    upstream = family.upstream_class(head)
    parts = ["embeddings"]
    if getattr(model.base_model, "embeddings_project", None) is not None:  # ELECTRA's, embedding_size → hidden_size
        parts.append("`embeddings_project`")
    parts.append("self-attention")
    if getattr(model.base_model, "pooler", None) is not None:
        parts.append("pooler")
    return {
        "family_name": family.name,
        "a_family": f"{'an' if family.name[0] in 'AEIOX' else 'a'} {family.name}",  # an ELECTRA, an XLM-RoBERTa
        "model_type": model.config.model_type,
        "upstream_class": f"transformers.{upstream.__name__}",
        "upstream_module": upstream.__module__.rsplit(".", 1)[0],
        "upstream_parts": ", ".join(parts) + " and heads",
        "tokenizer_class": TOKENIZER_MAPPING_NAMES.get(family.upstream_type) or "BertTokenizer",
    }


__all__ = ["TEMPLATES", "card_family", "family_lines"]
