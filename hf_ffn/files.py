"""Writing files and folders atomically (a temporary name beside the target, renamed at the end) with the permissions
of an ordinary file or folder (`tempfile` and safetensors create private ones: 0600 / 0700); and one training run per
output folder at a time (`one_run_per_output_dir`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

LOCK_FILE = ".hf_ffn.lock"  # held by a training run in its output folder (`one_run_per_output_dir`)


def current_umask() -> int:
    """The process umask (set and restored at once: there is no read-only call)."""
    umask = os.umask(0)
    os.umask(umask)
    return umask


def give_ordinary_permissions(path: str | os.PathLike) -> None:
    """chmod `path` (a file, or a folder and everything under it, links left alone) to what `open`/`mkdir` would
    have created: files `0o666 & ~umask`, folders `0o777 & ~umask`."""
    umask = current_umask()
    root = Path(path)
    entries = [root] if not root.is_dir() else [root, *root.rglob("*")]
    for entry in entries:
        if entry.is_symlink():
            continue
        entry.chmod((0o777 if entry.is_dir() else 0o666) & ~umask)


def check_folder_path(path: str | os.PathLike, argument: str = "output folder") -> None:
    """Check, before any work, that `path` can be (or already is) a folder.

    Raises:
        FileExistsError: when `path` (or a parent) is a file.
    """
    for candidate in (Path(path), *Path(path).parents):
        if candidate.exists() and not candidate.is_dir():
            raise FileExistsError(f"{argument} {str(path)!r}: {str(candidate)!r} is a file, not a folder")


def check_new_folder(path: str | os.PathLike, argument: str = "output folder") -> None:
    """Check, before any work, that `path` can become a new folder: it does not exist or is an empty folder.

    Raises:
        FileExistsError: naming `argument`, when `path` (or a parent) is a file, or `path` is a folder with files.
    """
    check_folder_path(path, argument)
    if Path(path).exists() and any(Path(path).iterdir()):
        raise FileExistsError(f"{argument} {str(path)!r} exists and is not empty; choose a new path")


@contextlib.contextmanager
def atomic_output_file(path: str | os.PathLike, suffix: str = ".tmp") -> Iterator[Path]:
    """Yield a temporary file name beside `path`, renamed to `path` with ordinary permissions after the block;
    nothing is left when the block raises (a previous `path` is kept)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=suffix, dir=target.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        give_ordinary_permissions(tmp)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_output_dir(output_dir: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary folder beside `output_dir`, renamed to `output_dir` with ordinary permissions only if the
    block succeeds; nothing is left when it raises.

    Raises:
        FileExistsError: if `output_dir` exists and is not an empty folder (checked before the block runs).
    """
    output = Path(output_dir)
    check_new_folder(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{output.name}.tmp-", dir=output.parent))
    try:
        yield tmp
        give_ordinary_permissions(tmp)
        if output.exists():
            output.rmdir()  # empty (checked above)
        tmp.rename(output)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C during a training run: its message says where the last checkpoint is and how to go on."""


def last_complete_checkpoint(output_dir: str | os.PathLike) -> str | None:
    """The newest `checkpoint-N` folder of `output_dir` that Trainer finished saving (its `trainer_state.json` is
    written last; `get_last_checkpoint` would pick a half-saved one), else None."""
    folder = Path(output_dir)
    steps = [] if not folder.is_dir() else [p for p in folder.glob("checkpoint-*") if p.name[11:].isdigit()]
    complete = [p for p in steps if p.is_dir() and (p / "trainer_state.json").is_file()]
    return str(max(complete, key=lambda p: int(p.name[11:]))) if complete else None


def interrupted_message(output_dir: str | os.PathLike) -> str:
    """Where an interrupted run in `output_dir` can go on from, and the option that resumes it."""
    last = last_complete_checkpoint(output_dir)
    if last is None:
        return f"no checkpoint saved yet in {os.fspath(output_dir)} (one every --save_steps): run again to start over"
    return f"the last checkpoint is {last}: rerun the same command with --resume_from_checkpoint last to go on from it"


def _only_disposable(folder: Path, disposable: tuple[str, ...]) -> bool:
    """Whether `folder` holds nothing but `disposable` entries: names, or "name/" for a folder holding only those."""
    return all(
        path.name in disposable
        or (f"{path.name}/" in disposable and path.is_dir() and _only_disposable(path, disposable))
        for path in folder.iterdir()
    )


def one_run_per_output_dir(run: Callable[..., Any] | None = None, *, disposable: tuple[str, ...] = ()):
    """Decorate a training run (a function given `TrainingArguments`) so that it holds an exclusive OS lock
    (`filelock`) on `output_dir/.hf_ffn.lock` while it runs: a second run into the same folder is refused at once.
    Taken by process 0 only, re-entrant, its file removed on release. Ctrl-C raises `RunInterrupted`. A failed run
    leaves no folder it created when that holds nothing but `disposable` entries (`hf-ffn mlm`'s `tokenizer`).

    Raises:
        FileExistsError: "--output_dir PATH is in use by another run ...", when another process holds the lock, or
            `output_dir` (or a parent) is a file.
    """
    if run is None:
        return functools.partial(one_run_per_output_dir, disposable=disposable)
    from filelock import FileLock, Timeout
    from transformers import TrainingArguments

    @functools.wraps(run)
    def locked(*args, **kwargs):
        training_args = next(a for a in (*args, *kwargs.values()) if isinstance(a, TrainingArguments))
        output_dir = Path(training_args.output_dir)
        if getattr(training_args, "process_index", 0) != 0:
            return run(*args, **kwargs)
        check_folder_path(output_dir, "--output_dir")
        created = not output_dir.exists()
        output_dir.mkdir(parents=True, exist_ok=True)
        lock = FileLock(output_dir / LOCK_FILE, is_singleton=True)  # one object per file: re-entrant in a process
        try:
            lock.acquire(timeout=0)
        except Timeout:
            raise FileExistsError(
                f"--output_dir {str(output_dir)!r} is in use by another run (it holds {LOCK_FILE}); wait for it to "
                f"end or choose another --output_dir"
            ) from None
        failed = True
        try:
            result = run(*args, **kwargs)
            failed = False
            return result
        except RunInterrupted:
            raise
        except KeyboardInterrupt:
            raise RunInterrupted(interrupted_message(output_dir)) from None
        finally:
            lock.release()
            if not lock.is_locked:
                (output_dir / LOCK_FILE).unlink(missing_ok=True)
                if failed and created and _only_disposable(output_dir, disposable):
                    shutil.rmtree(output_dir, ignore_errors=True)  # a failed run's folder: nothing to resume from

    return locked
