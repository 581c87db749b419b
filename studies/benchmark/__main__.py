"""Performance benchmark of hf_ffn against upstream BERT (a thin wrapper over `studies.benchmark`).

    python -m studies.benchmark --quick                                   # tiny sizes: a smoke test (about 30 s)
    # the full run behind studies/benchmark/benchmarks.md:
    python -m studies.benchmark --threads 1 --clock cpu --output-dir studies/benchmark

See `python -m studies.benchmark --help`.
"""

import sys

from studies.benchmark import main

if __name__ == "__main__":
    sys.exit(main())
