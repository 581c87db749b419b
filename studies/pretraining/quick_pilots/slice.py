"""The quick pilots' slice (README.md, "The pilots"), from the repository root:

    python studies/pretraining/quick_pilots/slice.py [../shared/data/pretraining]

Training text: the first 2.6M words of wiki-00 and of books-00; held out: the first 130k words of wiki-03 and of
books-03 (whole documents, cut at empty lines), written to out/pilot/data/{train,heldout}. The tokenizer
(out/pilot/tokenizer) is trained as the pilots had it: WordPiece 4,096 before `train_tokenizer`'s alphabet limit
(every character of the text kept; 1,404 of its 4,096 entries are single characters).
"""

import lzma
import sys
from pathlib import Path

from transformers import BertTokenizer

CORPUS = Path(sys.argv[1] if len(sys.argv) > 1 else "../shared/data/pretraining")
OUT = Path("out/pilot/data")


def documents(name: str):
    with lzma.open(CORPUS / name, "rt", encoding="utf-8") as file:
        lines = []
        for line in file:
            if line.strip():
                lines.append(line)
            elif lines:
                yield "".join(lines)
                lines = []
        if lines:
            yield "".join(lines)


def take(name: str, words: int, out: Path) -> None:
    count = kept = 0
    with open(out, "w") as file:
        for document in documents(name):
            file.write(document + "\n")
            count, kept = count + len(document.split()), kept + 1
            if count >= words:
                break
    print(out, kept, "documents", count, "words")


if __name__ == "__main__":
    (OUT / "train").mkdir(parents=True, exist_ok=True)
    (OUT / "heldout").mkdir(exist_ok=True)
    take("wiki-00.txt.xz", 2_600_000, OUT / "train/wiki.txt")
    take("books-00.txt.xz", 2_600_000, OUT / "train/books.txt")
    take("wiki-03.txt.xz", 130_000, OUT / "heldout/wiki.txt")
    take("books-03.txt.xz", 130_000, OUT / "heldout/books.txt")
    texts = [path.read_text() for path in sorted((OUT / "train").glob("*.txt"))]
    BertTokenizer().train_new_from_iterator(texts, vocab_size=4096).save_pretrained("out/pilot/tokenizer")
