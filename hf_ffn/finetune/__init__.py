"""`hf-ffn finetune`: fine-tune an FfnBert variant with transformers' `Trainer` on a task preset or your own labelled
text (single sentences or pairs, classes or regression), as transformers' `run_glue.py` does. Read top-down:

- `tasks`: the task presets (`TASKS`, `--task NAME`): their readers, columns, splits, metrics and `Recipe`s.
- `arguments`: `ClassificationDataArguments` (beside `hf_ffn.training.arguments.ModelArguments` and
  `TrainingArguments`).
- `data`: the classification splits and their column and label checks.
- `classification`: `run_classification`, the Trainer run, its metrics and their baseline.
- `run`: `finetune` / `finetune_main` (the entry point of `hf-ffn finetune`), the preset's recipe, the summary line.
"""

from .classification import baseline_metrics, run_classification
from .run import finetune, finetune_argv, finetune_main
from .tasks import TASKS, Recipe, Task, get_task, task_score

__all__ = [
    "TASKS",
    "Recipe",
    "Task",
    "baseline_metrics",
    "finetune",
    "finetune_argv",
    "finetune_main",
    "get_task",
    "run_classification",
    "task_score",
]
