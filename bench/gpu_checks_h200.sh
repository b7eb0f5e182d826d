#!/usr/bin/env bash
# This session's GPU checks in one device call (carry .whl); files land in $OUT.
#  1. the input-pipeline diagnosis on a real token file (issue 12): GPT-2 124M, the loader's
#     knobs searched from DataLoader's defaults (bench/spaces/input-pipeline.yaml); the study's
#     end checks include the memory-headroom check (eval pass + checkpoint save, issue 14);
#  2. proxy trials on Llama 1B (issue 10): each new kind of config first on a 2-layer model of
#     the same width; the throughput model's at-launch error on the full-depth trials after them;
#  3. bench/trial_overhead.py when present (issue 10: where a trial's time goes).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 - <<'PY'
import numpy as np
# 200M GPT-2 token ids (400 MB, uint16), as a tokenised corpus would be stored (nanoGPT style).
rng = np.random.default_rng(0)
rng.integers(0, 50257, size=200_000_000, dtype=np.uint16).tofile("/tmp/tokens.bin")
PY
db="sqlite:///$OUT/checks.db"
python3 -m autotuner.cli tune examples/gpt2-124m.yaml --space bench/spaces/input-pipeline.yaml \
  --data /tmp/tokens.bin --trials 10 --minutes 2.5 --db "$db" 2>&1 | tee "$OUT/input-pipeline.log"
study=$(grep -o 'study st-[0-9a-f]*' "$OUT/input-pipeline.log" | head -1 | cut -d' ' -f2)
python3 -m autotuner.cli best "$study" --db "$db" --json > "$OUT/best-input-pipeline.json"
python3 -m autotuner.cli trials "$study" --db "$db" --all --json > "$OUT/trials-input-pipeline.json"
python3 -m autotuner.cli tune llama-1b --space bench/spaces/proxy-check.yaml --proxy-layers 2 \
  --trials 10 --minutes 2 --db "$db" 2>&1 | tee "$OUT/proxy.log"
study=$(grep -o 'study st-[0-9a-f]*' "$OUT/proxy.log" | head -1 | cut -d' ' -f2)
python3 -m autotuner.cli best "$study" --db "$db" --json > "$OUT/best-proxy.json"
python3 -m autotuner.cli trials "$study" --db "$db" --all --json > "$OUT/trials-proxy.json"
if [ -f bench/trial_overhead.py ]; then
  timeout 100 python3 bench/trial_overhead.py --trials 2 --preset gpt2-124m 2>&1 | tee "$OUT/trial-overhead.log"
fi
