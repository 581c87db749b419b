"""Model card templates (Jinja), filled by `hf_ffn.conversion.card` (converted folders) and `hf_ffn.model_card`
(fine-tuned folders)."""

from pathlib import Path

TEMPLATES = Path(__file__).parent
