"""Readers of text files, decoded by `decode_text` (UTF-8, else Latin-1): a folder of label files
(`read_label_files`), plain-text documents (`read_text_documents`), the path checks of the MLM corpus (`expand_paths`,
`check_not_wide`, `is_saved_dataset`). The labelled-data readers of `hf-ffn finetune`: `hf_ffn.finetune.readers`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

# Files a label folder holds beside its label files (a data set's own notes), skipped by `read_label_files`.
NOTE_FILES = ("README*", "LICENSE*", "SOURCE*")


def read_label_files(
    directory: str | Path, argument: str = "--label_dir", pattern: str = "*"
) -> tuple[list[str], list[str]]:
    """`(texts, labels)` of a folder with one text file per label, one example per line (blank lines skipped): the
    files matching `pattern` in name order, hidden files and `NOTE_FILES` left out. A file's label is its stem
    (`pos.txt` → "pos"), or its extension when every file has the same stem (`reviews.pos` → "pos").

    Raises:
        FileNotFoundError, ValueError: naming `argument`: no such folder or file, an empty file, a label twice, one.
    """
    folder = Path(directory)
    if not folder.is_dir():
        raise FileNotFoundError(f"{argument}: no such folder: {str(folder)!r}")
    files = sorted(
        file
        for file in folder.glob(pattern)
        if file.is_file() and not file.name.startswith(".") and not any(file.match(note) for note in NOTE_FILES)
    )
    if not files:
        raise FileNotFoundError(
            f"{argument}: {str(folder)!r} holds no label files matching {pattern!r} (one text "
            f"file per label, one example per line, e.g. pos.txt and neg.txt)"
        )
    if len(files) < 2:
        raise ValueError(f"{argument}: {str(folder)!r} has one label file ({files[0].name}); need two or more")
    same_stem = len({file.stem for file in files}) == 1
    names = [file.suffix[1:] if same_stem else file.stem for file in files]
    if len(set(names)) != len(names):
        raise ValueError(
            f"{argument}: the files of {str(folder)!r} give the same label twice: "
            f"{', '.join(file.name for file in files)}"
        )
    texts: list[str] = []
    labels: list[str] = []
    for file, name in zip(files, names, strict=True):
        lines = [line.strip() for line in decode_text(file.read_bytes(), file).splitlines()]
        lines = [line for line in lines if line]
        if not lines:
            raise ValueError(f"{argument}: label file {str(file)!r} is empty")
        texts += lines
        labels += [name] * len(lines)
    return texts, labels


def is_saved_dataset(path: str | Path) -> bool:
    """Whether `path` is a folder written by `datasets`' `save_to_disk` (`load_from_disk` reads it)."""
    folder = Path(path)
    return (folder / "dataset_dict.json").is_file() or (folder / "state.json").is_file()


# Byte-order marks of the encodings that UTF-8-else-Latin-1 would read as garbage (every other byte a NUL).
WIDE_BOMS = {b"\xff\xfe\x00\x00": "UTF-32", b"\x00\x00\xfe\xff": "UTF-32", b"\xff\xfe": "UTF-16", b"\xfe\xff": "UTF-16"}


def check_not_wide(head: bytes, name: str | Path) -> None:
    """Refuse (`ValueError`, naming `iconv`) text whose first bytes `head` are UTF-16 or UTF-32 (a byte-order mark,
    or NUL bytes)."""
    wide = next((encoding for bom, encoding in WIDE_BOMS.items() if head.startswith(bom)), None)
    if wide is None and b"\x00" in head:
        wide = "UTF-16 or UTF-32"
    if wide is not None:
        raise ValueError(
            f"{name} is {wide} text (a byte-order mark or NUL bytes at its start); the readers take UTF-8 (else "
            f"Latin-1): convert it, e.g. `iconv -f {wide.split()[0]} -t UTF-8 {name}`"
        )


def decode_text(data: bytes, name: str | Path = "the text") -> str:
    """`data` decoded as UTF-8, else as Latin-1 (every byte a character), after `check_not_wide`."""
    check_not_wide(data[:4096], name)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")


def expand_paths(paths: Sequence[str | Path], pattern: str, argument: str) -> list[Path]:
    """The files of `paths` in order, each folder expanded to its files matching `pattern` (sorted by name);
    `FileNotFoundError` naming `argument` for a missing path or a folder without a matching file."""
    files: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            found = sorted(file for file in path.glob(pattern) if file.is_file())
            if not found:
                raise FileNotFoundError(f"{argument}: folder {str(path)!r} holds no file matching {pattern!r}")
            files += found
        elif path.is_file():
            files.append(path)
        else:
            raise FileNotFoundError(f"{argument}: {str(path)!r} does not exist")
    return files


def read_text_documents(
    paths: Sequence[str | Path], pattern: str = "*.txt", argument: str = "--train_files"
) -> list[tuple[str, str]]:
    """`(file name, text)` for each file of `expand_paths(paths, pattern)`, decoded by `decode_text` (`ValueError`:
    a blank file)."""
    files = expand_paths(paths, pattern, argument)
    documents = []
    for file in files:
        text = decode_text(file.read_bytes(), file)
        if not text.strip():
            raise ValueError(f"{argument}: text file {str(file)!r} is empty")
        documents.append((file.name, text))
    return documents
