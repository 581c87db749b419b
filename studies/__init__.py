"""The studies around the hf_ffn library: what was measured, how, and the code that measured it. Not installed
(`pip install hf_ffn` ships `hf_ffn` alone); importable as `studies` from the repository root, where every runner
is started with `python -m studies.<study>.<runner>` (pytest adds the root: `pythonpath` in pyproject.toml).

One folder per study, with its README (question, command, result, figure, machine), its runners, the code only it
uses, and its reports and raw runs: `healing/`, `variant_comparison/`, `four_tasks/`, `finetune_collapse/`,
`benchmark/` (a package: speed and memory against upstream `BertModel`, `python -m studies.benchmark`; unpadded
execution, `python -m studies.benchmark.unpadded_benchmark`; the GPU check), `pretraining/` (from scratch; its
first study, `withdrawn_2m/`, keeps its records only), `switches/`. What several studies share is `common/`
(the comparisons' statistics, fine-tuning options and start hashes; the machine, versions and portable paths the
reports carry). `gpu_call.sh` is the whole call on a GPU machine (the benchmark's GPU check, then the pre-training
study's units).

They import the library (`hf_ffn`); the library never imports them.
"""
