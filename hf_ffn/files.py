"""Writing files and folders: to a temporary name beside the target, renamed at the end, with the permissions of
an ordinary file or folder (`0o666 & ~umask`, `0o777 & ~umask`).

`tempfile.mkstemp` / `mkdtemp` create private entries (0600 / 0700), and so does safetensors' `save_file` (hence
every `save_pretrained`'s `model.safetensors`): left as they are, other users and serving processes could not read
what hf_ffn writes. `atomic_output_file` and `atomic_output_dir` give the result the mode any `open(path, "w")` or
`mkdir` would have.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


def current_umask() -> int:
    """The process umask (read by setting it and restoring it at once: there is no read-only call)."""
    umask = os.umask(0)
    os.umask(umask)
    return umask


def give_ordinary_permissions(path: str | os.PathLike) -> None:
    """chmod `path` (a file, or a folder and everything under it) to what `open`/`mkdir` would have created:
    files `0o666 & ~umask`, folders `0o777 & ~umask`. Links are left alone."""
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
        FileExistsError: "ARGUMENT 'PATH' is a file, not a folder" when `path` (or a parent) is a file.
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
    """Yield a temporary file name beside `path`; after the block it gets ordinary permissions and is renamed to
    `path` (replacing it). Nothing is left at either name when the block raises (a previous `path` is kept)."""
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
    """Yield a temporary folder beside `output_dir`, renamed to `output_dir` only if the block succeeds, with
    ordinary permissions on it and on everything written into it.

    Nothing is left at `output_dir` (nor the temporary folder) when the block raises.

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


__all__ = [
    "atomic_output_dir",
    "atomic_output_file",
    "check_folder_path",
    "check_new_folder",
    "current_umask",
    "give_ordinary_permissions",
]
