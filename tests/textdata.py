"""A small raw-text corpus and a real tokenizer trained on it, for the `jsonl` data format's
tests: documents of varied length (some shorter than a tiny model's window, so they pad), a
blank line between two of them, and a byte-level BPE tokenizer.json of `vocab` ids."""

from __future__ import annotations

import json
from pathlib import Path

SENTENCE = "the model reads raw text and the loader tokenizes every document as it goes"
WORDS = SENTENCE.split()


def documents(count: int = 60) -> list[str]:
    """Deterministic documents of 3 to ~90 words."""
    return [
        " ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(3 + (i * 13) % 88))
        for i in range(count)
    ]


def write_corpus(directory: Path, vocab: int = 300, count: int = 60) -> tuple[Path, Path]:
    """(corpus.jsonl, tokenizer.json) under `directory`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    docs = documents(count)
    corpus = directory / "corpus.jsonl"
    lines = [json.dumps({"id": i, "text": text}) for i, text in enumerate(docs)]
    lines.insert(5, "")  # a blank line is no document
    corpus.write_text("\n".join(lines) + "\n")

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(docs, trainer)
    path = directory / "tokenizer.json"
    tokenizer.save(str(path))
    return corpus, path
