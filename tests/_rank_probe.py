"""Run scripts/finetune_classification.py unchanged and record what each process ends with.

    torchrun --nproc_per_node 2 tests/_rank_probe.py PROBE_DIR SCRIPT_ARGS...     (or plain python, or
    accelerate launch; `run(probe_dir, args)` does the same inside the calling process)

The script file is executed as `__main__` (runpy), exactly as a launcher runs it. The only addition is an
observer around `transformers.Trainer.train`: after training, each process writes `PROBE_DIR/rank{N}.json`
(world size, SHA-256 of its final state dict, its logged losses) and `rank{N}.safetensors` (its final weights).
Used by tests/test_distributed.py; not a test itself.
"""

from __future__ import annotations

import hashlib
import json
import runpy
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import Trainer

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "finetune_classification.py"


def state_dict_sha256(state: dict[str, torch.Tensor]) -> str:
    digest = hashlib.sha256()
    for name in sorted(state):
        digest.update(name.encode())
        digest.update(state[name].numpy().tobytes())
    return digest.hexdigest()


def run(probe_dir: str | Path, args: list[str]) -> None:
    """Run the script with `args` in this process, recording this process's final weights under `probe_dir`."""
    probe_dir = Path(probe_dir)
    train = Trainer.train

    def train_and_record(self: Trainer, *train_args, **train_kwargs):
        output = train(self, *train_args, **train_kwargs)
        state = {k: v.detach().cpu().contiguous() for k, v in self.model.state_dict().items()}
        rank = self.args.process_index
        record = {
            "rank": rank,
            "world_size": self.args.world_size,
            "sha256": state_dict_sha256(state),
            "losses": [entry["loss"] for entry in self.state.log_history if "loss" in entry],
        }
        save_file(state, str(probe_dir / f"rank{rank}.safetensors"))
        (probe_dir / f"rank{rank}.json").write_text(json.dumps(record))
        return output

    argv = sys.argv
    Trainer.train = train_and_record
    sys.argv = [str(SCRIPT), *args]
    try:
        runpy.run_path(str(SCRIPT), run_name="__main__")
    finally:
        Trainer.train, sys.argv = train, argv


if __name__ == "__main__":
    run(sys.argv[1], sys.argv[2:])
