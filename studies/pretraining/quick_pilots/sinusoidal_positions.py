"""Quick pilots D and E only: `hf-ffn mlm` with the position embeddings initialised as sinusoids (Vaswani et al.
2017, sec. 3.5) scaled to an rms of POS_SCALE × initializer_range: a patch of `_init_weights`, not a library option.
"""

import math
import os
import sys

import torch
from transformers.models.bert.modeling_bert import BertEmbeddings

from hf_ffn import modeling_ffn_bert
from hf_ffn.cli import main

SCALE = float(os.environ.get("POS_SCALE", "1"))
_init_weights = modeling_ffn_bert.FfnBertPreTrainedModel._init_weights


def sinusoidal_init_weights(self, module):
    _init_weights(self, module)
    if isinstance(module, BertEmbeddings):
        weight = module.position_embeddings.weight
        positions, width = weight.shape
        angle = torch.arange(positions, dtype=torch.float32)[:, None] * torch.exp(
            -math.log(10000.0) * torch.arange(0, width, 2, dtype=torch.float32) / width
        )
        table = torch.zeros(positions, width)
        table[:, 0::2], table[:, 1::2] = torch.sin(angle), torch.cos(angle)
        with torch.no_grad():
            weight.copy_(table * (SCALE * self.config.initializer_range / table.pow(2).mean().sqrt()))


modeling_ffn_bert.FfnBertPreTrainedModel._init_weights = sinusoidal_init_weights

if __name__ == "__main__":
    sys.exit(main())
