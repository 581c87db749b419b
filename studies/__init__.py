"""Studies and benchmarks around the hf_ffn library. They live beside the scripts that run them, outside the
installed package (`pip install hf_ffn` ships the model, conversion, healing, training and the CLI only), and are
importable as `studies` when `scripts/` is on `sys.path`: a script run as `python scripts/x.py` has it there, and
pytest adds it (`pythonpath` in pyproject.toml).

- `benchmark`: speed and memory of FfnBert against upstream `BertModel` (`studies/benchmark/`).
- `unpadded_benchmark`: `unpad_tokens` off and on against upstream on real padded batches
  (`studies/unpadded_benchmark.py`); `unpadded_report` writes its report.
- `activation_curves`: every activation's values and derivatives (docs/switches.md figures).
- `layer_norm_study`: Post-LN vs Pre-LN gradient norms and a short MLM run (docs/switches.md).
- `comparison`: the variant comparison's statistics, table and plot (`studies/variant_comparison/compare_variants.py`);
  `variant_throughput` times its variants side by side.
- `environment`: the machine and versions the comparison and the healing study report.

They import the library (`hf_ffn`); the library never imports them. (The FFN parameter table, `hf-ffn params`,
is product: `hf_ffn.params`.)
"""
