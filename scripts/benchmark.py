"""Performance benchmark of hf_ffn against upstream BERT (a thin wrapper over `studies.benchmark`).

    python scripts/benchmark.py --quick                                   # tiny sizes: a smoke test (about 30 s)
    python scripts/benchmark.py --threads 1 --clock cpu --output-dir docs  # the full run behind docs/benchmarks.md

See `python scripts/benchmark.py --help`.
"""

import sys

from studies.benchmark import main

if __name__ == "__main__":
    sys.exit(main())
