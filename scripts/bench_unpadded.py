"""Unpadded execution benchmark (a thin wrapper over `studies.unpadded_benchmark`).

    python scripts/bench_unpadded.py --output-dir docs   # full run: MiniLM and bert-base shapes, eager and sdpa
    python scripts/bench_unpadded.py --quick             # a tiny model: a smoke test (seconds)

Writes unpadded_benchmark.json and unpadded_benchmark.md to out/ unless --output-dir says otherwise; see --help.
"""

import sys

from studies.unpadded_benchmark import main

if __name__ == "__main__":
    sys.exit(main())
