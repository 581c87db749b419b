"""The parity job and its parts: which checkpoint (`checkpoints`), the example batches (`batches`), the one
output-difference helper (`compare`) and the job itself (`job`: `run_parity`, `variant_report`, `format_table`).

Every public name of the parts is importable from `hf_ffn.parity`.
"""

from ..logging_utils import quiet_transformers
from .batches import (
    SENTENCE_PAIRS,
    TIME_FLIES_IDS,
    UPSTREAM_MASKS_PACKED_SEQUENCES,
    example_batch,
    flattened_batch,
    head_inputs,
    padded_batch,
)
from .checkpoints import BERT_BASE_NAMES, bundled_checkpoint, cached_bert_base, choose_default_checkpoint, hub_reachable
from .compare import (
    COMPARED_OUTPUTS,
    ParityRow,
    compare_outputs,
    compare_tensors,
    flatten_output,
    output_difference,
    tensor_difference,
)
from .job import (
    FLATTENED,
    FLATTENED_HEADS,
    HEAD_PAIRS,
    PARITY_DTYPES,
    PER_SEQUENCE_OUTPUTS,
    UNPADDED_FP32_TOLERANCE,
    UNPADDED_HALF_ROUNDINGS,
    NotPlainBertError,
    ffn_outputs,
    ffn_rows,
    flattened_rows,
    format_table,
    head_folders,
    parity_device,
    parity_dtype,
    rows_as_dicts,
    run_parity,
    unpadded_rows,
    variant_report,
)

__all__ = [
    "BERT_BASE_NAMES",
    "COMPARED_OUTPUTS",
    "FLATTENED",
    "FLATTENED_HEADS",
    "HEAD_PAIRS",
    "PARITY_DTYPES",
    "PER_SEQUENCE_OUTPUTS",
    "UNPADDED_FP32_TOLERANCE",
    "UNPADDED_HALF_ROUNDINGS",
    "NotPlainBertError",
    "ParityRow",
    "SENTENCE_PAIRS",
    "TIME_FLIES_IDS",
    "UPSTREAM_MASKS_PACKED_SEQUENCES",
    "bundled_checkpoint",
    "cached_bert_base",
    "choose_default_checkpoint",
    "compare_outputs",
    "compare_tensors",
    "example_batch",
    "ffn_outputs",
    "ffn_rows",
    "flatten_output",
    "flattened_batch",
    "flattened_rows",
    "format_table",
    "head_folders",
    "head_inputs",
    "hub_reachable",
    "output_difference",
    "padded_batch",
    "parity_device",
    "parity_dtype",
    "quiet_transformers",
    "rows_as_dicts",
    "run_parity",
    "tensor_difference",
    "unpadded_rows",
    "variant_report",
]
