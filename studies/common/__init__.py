"""What several studies share: the code no one study owns.

- `comparison`: the variant comparisons' statistics, table and plot (`variant_comparison/`, `four_tasks/`).
- `finetune_options`, `start_weights`: what both comparisons share (fine-tuning options, the SHA-256 of a run's
  start).
- `environment`: the machine, versions and portable paths the reports carry (every study that writes a report).
"""
