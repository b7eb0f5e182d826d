#!/usr/bin/env bash
# Device call 1 of this session (carry .whl); files land in $OUT.
#  1. Issue 12: an input pipeline that starves the GPU at DataLoader's defaults, and the fix.
#     Raw text (the Python standard library's sources, one JSON line per file, ~40 MiB) with a
#     BPE tokenizer trained on it (bench/text_corpus.py), tokenized as it is read; GPT-2 124M
#     in bf16 eager; the loader's knobs searched from DataLoader's defaults
#     (bench/spaces/input-pipeline.yaml).
#  2. Issue 14: a Llama 1B study with --global-batch (bench/global_batch_h200.sh).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -c "import tokenizers, sys; print('tokenizers', tokenizers.__version__, sys.version)"
nproc; python3 bench/text_corpus.py /tmp/text --max-mb 40 --vocab 32768 2>&1 | tee "$OUT/corpus.log"
db="sqlite:///$OUT/starvation.db"
python3 -m autotuner.cli tune examples/gpt2-124m.yaml --space bench/spaces/input-pipeline.yaml \
  --data /tmp/text/corpus.jsonl --tokenizer /tmp/text/tokenizer.json --trials 10 --minutes 3 \
  --db "$db" 2>&1 | tee "$OUT/starvation.log"
study=$(grep -o 'study st-[0-9a-f]*' "$OUT/starvation.log" | head -1 | cut -d' ' -f2)
python3 -m autotuner.cli best "$study" --db "$db" --json > "$OUT/best-starvation.json"
python3 -m autotuner.cli trials "$study" --db "$db" --all --json > "$OUT/trials-starvation.json"
bash bench/global_batch_h200.sh
# At most 8 files come back: one archive.
cd "$OUT" && tar czf input-starvation-and-global-batch.tgz --remove-files ./*.db ./*.log ./*.json
