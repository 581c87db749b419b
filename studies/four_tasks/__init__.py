"""The four-task comparison (README.md): its runner `compare_tasks` and its statistics and report,
`task_comparison`."""
