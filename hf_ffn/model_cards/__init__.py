"""Model card templates (Jinja, rendered by `huggingface_hub.ModelCard.from_template`): one per family of
variants (`gated.md`, `standard.md`) plus the body they share (`_body.md`). Filled by `hf_ffn.model_card`."""
