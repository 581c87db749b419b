"""The parity job (`job`) and its parts: which checkpoint (`checkpoints`), the example batches (`batches`) and the
output comparison (`compare`); every public name of the parts is importable from here."""

from ..logging_utils import quiet_transformers
from . import batches, checkpoints, compare, job
from .batches import *  # noqa: F403
from .checkpoints import *  # noqa: F403
from .compare import *  # noqa: F403
from .job import *  # noqa: F403

__all__ = [*batches.__all__, *checkpoints.__all__, *compare.__all__, *job.__all__, "quiet_transformers"]
