"""Model card templates (Jinja, rendered by `huggingface_hub.ModelCard.from_template`), filled by `hf_ffn.model_card`:
for converted folders one per family of variants (`gated.md`, `standard.md`) plus the body they share
(`_body.md`); for fine-tuned folders `fine_tuned.md`."""
