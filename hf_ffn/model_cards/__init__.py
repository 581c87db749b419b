"""Model card templates (Jinja, rendered by `huggingface_hub.ModelCard.from_template`), filled by
`hf_ffn.conversion.card` (converted folders: one per family of variants, `gated.md` and `standard.md`, plus the body
they share, `_body.md`) and `hf_ffn.model_card` (fine-tuned folders: `fine_tuned.md`)."""

from pathlib import Path

TEMPLATES = Path(__file__).parent
