"""The studies around the hf_ffn library: what was measured, how, and the code that measured it. Not installed
(`pip install hf_ffn` ships `hf_ffn` alone); importable as `studies` from the repository root, where every runner
is started with `python -m studies.<study>.<runner>` (pytest adds the root: `pythonpath` in pyproject.toml).

Each study is a folder with its README (question, command, result, figure, machine), its runners and its reports
and raw runs: `healing/`, `variant_comparison/`, `four_tasks/`, `finetune_collapse/`, `benchmark/`, `switches/`.
The modules here are the code they share:

- `benchmark` (a package, also the performance study's folder): speed and memory of FfnBert against upstream
  `BertModel` (`python -m studies.benchmark`).
- `unpadded_benchmark`: `unpad_tokens` off and on against upstream on real padded batches
  (`python -m studies.unpadded_benchmark`); `unpadded_report` writes its report, `sentence_order` its
  sentence-transformers batches.
- `comparison`: the variant comparison's statistics, table and plot; `variant_throughput` times its variants
  side by side; `task_comparison`: the four-task report; `finetune_options` and `start_weights`: what both
  comparisons share (fine-tuning options, the SHA-256 of a run's start).
- `activation_curves`, `layer_norm_study`: the switches study's figures.
- `environment`: the machine, versions and portable paths the reports carry.

They import the library (`hf_ffn`); the library never imports them.
"""
