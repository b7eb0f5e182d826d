#!/usr/bin/env bash
# One landscape-recording session on the lent GPU machine (bench/record_landscape.py): the
# committed recording of MODEL is copied in, a session of MINUTES is added on every GPU of the
# machine (one trial per GPU at a time), and the database comes back in $OUT: commit it over
# bench/results/landscape_recording/MODEL.db.
#   bash bench/record_landscape_h200.sh MODEL GLOBAL_BATCH MINUTES   # carry .whl
#   SPACE=bench/spaces/X.yaml bash bench/record_landscape_h200.sh ...  # another space's configs
#   HEADROOM=0 bash bench/record_landscape_h200.sh ...  # run configs sure to break the headroom
#   SPACE=bench/spaces/hf-landscape.yaml bash bench/record_landscape_h200.sh \
#       examples/hf/llama-3.2-1b.yaml 65536 8   # a model spec file: recorded as llama-3.2-1b.db
# An `hf` spec needs the second wheelhouse installed first (bench/wheelhouse_hf.sh, carried as
# .whl-hf in an earlier call: bash bench/install_wheels_h200.sh .whl-hf /tmp/site-hf).
# Two sessions in one call add up: the second goes on from the first's database in $OUT.
# Keep MINUTES under the device call's limit with room for Ray's start and the last trial
# (9 for a 10-minute call), or run it through bench/tune_bg_h200.sh's pattern.
set -euo pipefail
model=$1 global_batch=$2 minutes=$3
bash bench/install_wheels_h200.sh
site=/tmp/site; [ -d /tmp/site-hf ] && site=$site:/tmp/site-hf
export PYTHONPATH=$site:$PWD PYTHONUNBUFFERED=1 COLUMNS=${COLUMNS:-100}
# The lent multi-GPU machines need NVLink multicast off in every process (their NCCL and symmetric memory fail or hang at init otherwise).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
name=$(basename "$model" .yaml)
committed=bench/results/landscape_recording/$name.db
db=$OUT/$name.db
if [ -f "$committed" ] && [ ! -f "$db" ]; then cp "$committed" "$db"; fi
space_args=()
if [ -n "${SPACE:-}" ]; then space_args=(--space "$SPACE"); fi
if [ -n "${HEADROOM:-}" ]; then space_args+=(--headroom "$HEADROOM"); fi
python3 bench/record_landscape.py "$model" --global-batch "$global_batch" --minutes "$minutes" \
  "${space_args[@]}" --db "$db" 2>&1 | tee -a "$OUT/record-$name.log"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/gpu.csv"
