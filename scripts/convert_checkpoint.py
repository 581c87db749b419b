"""Convert a BERT checkpoint into an FfnBert variant folder (or a default FfnBert folder back to plain BERT).

A thin wrapper over `hf-ffn convert` (`hf_ffn.conversion.convert_checkpoint` / `export_to_bert`), e.g.

    python scripts/convert_checkpoint.py PATH_TO_BERT out/geglu --ffn_type geglu
    python scripts/convert_checkpoint.py PATH_TO_BERT out/swiglu-2048 --ffn_type swiglu --init fresh --width matched
    python scripts/convert_checkpoint.py out/default-ffn-bert out/bert --to_bert
"""

import sys

from hf_ffn.cli import main

if __name__ == "__main__":
    sys.exit(main(["convert", *sys.argv[1:]]))
