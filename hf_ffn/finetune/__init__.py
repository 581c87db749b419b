"""`hf-ffn finetune`: fine-tune an FfnBert variant with transformers' `Trainer` on a task preset or your own labelled
text, as transformers' `run_glue.py` does. `tasks`: the presets; `arguments`: the data arguments; `data`: the splits
and their checks; `classification`: the Trainer run and its metrics; `run`: the entry points and the summary line.
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
