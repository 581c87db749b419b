"""Studies and benchmarks around the hf_ffn library, not part of the model library itself.

- `benchmark`: speed and memory of FfnBert against upstream `BertModel` (`hf-ffn bench`).
- `unpadded_benchmark`: `unpad_tokens` off and on against upstream on real padded batches
  (`scripts/bench_unpadded.py`); `unpadded_report` writes its report.
- `params`: FFN parameter and FLOP tables (`hf-ffn params`).
- `activation_curves`: every activation's values and derivatives (docs/switches.md figures).
- `layer_norm_study`: Post-LN vs Pre-LN gradient norms and a short MLM run (docs/switches.md).
- `comparison`: the variant comparison's statistics, table and plot (`scripts/compare_variants.py`);
  `variant_throughput` times its variants side by side.
- `environment`: the machine and versions the comparison and the healing study report.

They import the library (`hf_ffn`); the library never imports them.
"""
