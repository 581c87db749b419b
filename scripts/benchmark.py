"""Performance benchmark of hf_ffn against upstream BERT (a thin wrapper over `hf_ffn.studies.benchmark`).

    python scripts/benchmark.py --output-dir docs     # full run (about 10 minutes on 2 CPU cores)
    python scripts/benchmark.py --quick               # tiny sizes: a smoke test (seconds)

Same options as `hf-ffn bench`; see `python scripts/benchmark.py --help`.
"""

import sys

from hf_ffn.studies.benchmark import main

if __name__ == "__main__":
    sys.exit(main())
