#!/usr/bin/env bash
# Issue 14's acceptance on the H200: a Llama 1B study with --global-batch, every trial at the
# target (micro-batch 3 cannot divide it and must be pruned, not rounded). Carry .whl.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
db="sqlite:///$OUT/global-batch.db"
python3 -m autotuner.cli tune llama-1b --space bench/spaces/global-batch-check.yaml \
  --global-batch 65536 --headroom 0 --trials 7 --minutes 1.5 --db "$db" 2>&1 | tee "$OUT/global-batch.log"
study=$(grep -o 'study st-[0-9a-f]*' "$OUT/global-batch.log" | head -1 | cut -d' ' -f2)
python3 -m autotuner.cli trials "$study" --db "$db" --all --json > "$OUT/trials-global-batch.json"
python3 -m autotuner.cli best "$study" --db "$db" --json > "$OUT/best-global-batch.json"
