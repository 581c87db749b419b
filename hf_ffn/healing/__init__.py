"""Healing converted BERTs: distil a converted FfnBert (the student) from its source checkpoint (the teacher), end to
end (`distill`) or layer by layer (`layerwise`, `layerwise_folder`), measure it on held-out text (`metrics`) and write
the healed folder (`healed_folder`); `run` is what `hf-ffn heal` runs. Every public name of the parts is importable
from here.
"""

from . import distill, healed_folder, layerwise, layerwise_folder, metrics, run
from .distill import *  # noqa: F403
from .healed_folder import *  # noqa: F403
from .layerwise import *  # noqa: F403
from .layerwise_folder import *  # noqa: F403
from .metrics import *  # noqa: F403
from .run import *  # noqa: F403

__all__ = [
    *distill.__all__,
    *healed_folder.__all__,
    *layerwise.__all__,
    *layerwise_folder.__all__,
    *metrics.__all__,
    *run.__all__,
]
