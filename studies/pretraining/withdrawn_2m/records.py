"""The pre-training study's run records (runs.jsonl, one JSON object per finished run, written by
`studies.pretraining.withdrawn_2m.run`): read by the runner (what is done), the fine-tuning runner (which
checkpoints) and the report."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from hf_ffn.comparing import read_runs


def read_records(path: Path) -> list[dict]:
    """The records of runs.jsonl (a later record of the same name wins; a partial line, a run being written, is
    skipped), each with `lr`, the run's peak learning rate. Records written before the runner kept the schedule
    apart ("learning_rate_schedule") hold the schedule under "learning_rate": it is moved, the peak read from the
    run's name. Lines are read by `hf_ffn.comparing.read_runs`."""
    records = {}
    for record in read_runs(path):
        if isinstance(record.get("learning_rate"), list):
            record["learning_rate_schedule"] = record["learning_rate"]
            record["learning_rate"] = float(re.search(r"-lr(.+?)-warmup", record["name"])[1])
        record["lr"] = record["learning_rate"]
        records[record["name"]] = record
    return list(records.values())


def study_records(records: list[dict], study: str) -> list[dict]:
    """The records of `study`'s grid ("a" or "b"): the runs at the `max_steps` most of its runs have (ties: the
    longest), so a smoke run in the same folder, or a few longer runs beside the grid, are left out; by seed."""
    chosen = [r for r in records if r["study"] == study]
    counts = Counter(r["max_steps"] for r in chosen)
    grid = max(counts, key=lambda steps: (counts[steps], steps), default=0)
    return sorted((r for r in chosen if r["max_steps"] == grid), key=lambda r: (r["seed"], r["name"]))


def longer_records(records: list[dict], study: str) -> list[dict]:
    """The runs of `study` longer than its grid's (`study_records`), by name."""
    grid = study_records(records, study)
    steps = grid[0]["max_steps"] if grid else 0
    return sorted((r for r in records if r["study"] == study and r["max_steps"] > steps), key=lambda r: r["name"])
