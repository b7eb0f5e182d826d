"""A raw-text corpus and a tokenizer for it, made from what any Python install has: the
standard library's source files (tens of MB of real text), one JSON line per file.

    python bench/text_corpus.py OUT_DIR [--max-mb 40] [--vocab 32768]

Writes OUT_DIR/corpus.jsonl and OUT_DIR/tokenizer.json (a byte-level BPE trained on the corpus
with the `tokenizers` package). Used by bench/input_starvation_h200.sh to measure an input
pipeline that tokenizes as it reads (`--data corpus.jsonl --tokenizer tokenizer.json`); nothing
is downloaded, so it runs on the lent GPU machine too.
"""

from __future__ import annotations

import argparse
import json
import sysconfig
import time
from pathlib import Path


def stdlib_texts(max_bytes: int) -> list[str]:
    """The stdlib's .py files (site-packages excluded), sorted by path, up to max_bytes."""
    root = Path(sysconfig.get_paths()["stdlib"])
    texts, total = [], 0
    for path in sorted(root.rglob("*.py")):
        if "site-packages" in path.parts or "dist-packages" in path.parts:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if not text.strip():
            continue
        texts.append(text)
        total += len(text.encode())
        if total >= max_bytes:
            break
    return texts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--max-mb", type=float, default=40.0)
    parser.add_argument("--vocab", type=int, default=32768)
    args = parser.parse_args()
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    args.out.mkdir(parents=True, exist_ok=True)
    texts = stdlib_texts(int(args.max_mb * 2**20))
    corpus = args.out / "corpus.jsonl"
    with corpus.open("w") as f:
        for text in texts:
            f.write(json.dumps({"text": text}) + "\n")
    t0 = time.perf_counter()
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=args.vocab,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer)
    tokenizer.save(str(args.out / "tokenizer.json"))
    trained = time.perf_counter() - t0
    t0 = time.perf_counter()
    sample = texts[:: max(1, len(texts) // 200)]
    tokens = sum(len(tokenizer.encode(t).ids) for t in sample)
    rate = tokens / (time.perf_counter() - t0)
    print(
        f"{corpus}: {len(texts):,} documents, {corpus.stat().st_size / 2**20:.1f} MiB; "
        f"tokenizer {tokenizer.get_vocab_size():,} ids, trained in {trained:.1f} s; "
        f"{tokens / len(sample):,.0f} tokens a document; one process encodes {rate:,.0f} tokens/s"
    )


if __name__ == "__main__":
    main()
