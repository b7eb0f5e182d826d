#!/usr/bin/env bash
# One `autotuner tune` on the lent H200, with its database, best and trials under $RESULTS
# (default $OUT).
#   bash bench/tune_h200.sh MODEL SPACE MINUTES [extra tune flags...]
# Run through the device tool (carry .whl); see bench/results/tune_llama_h200/README.md.
# A tune longer than one device call: bench/tune_bg_h200.sh.
set -euo pipefail
model=$1 space=$2 minutes=$3
shift 3
results=${RESULTS:-$OUT}
mkdir -p "$results"
bash bench/install_wheels_h200.sh
# The hf family's wheels, where a previous call installed them (bench/wheelhouse_hf.sh).
site=/tmp/site; [ -d /tmp/site-hf ] && site=$site:/tmp/site-hf
export PYTHONPATH=$site:$PWD PYTHONUNBUFFERED=1 COLUMNS=${COLUMNS:-100}
name=${NAME:-$(basename "$model" .yaml)}
db="sqlite:///$results/tune-$name.db"
python3 -m autotuner.cli tune "$model" --space "$space" --minutes "$minutes" --db "$db" "$@" \
  2>&1 | tee "$results/tune-$name.log"
study=$(grep -o 'study st-[0-9a-f]*' "$results/tune-$name.log" | head -1 | cut -d' ' -f2)
python3 -m autotuner.cli best "$study" --db "$db" --json > "$results/best-$name.json"
python3 -m autotuner.cli trials "$study" --db "$db" --all --json > "$results/trials-$name.json"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$results/gpu.csv"
