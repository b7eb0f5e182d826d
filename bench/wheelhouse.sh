#!/usr/bin/env bash
# The wheelhouse (.whl) the lent GPU machine needs for studies and trials, sized to travel: the
# tree and `.whl` together must stay under the device tool's 64 MiB.
#   bash bench/wheelhouse.sh            # from the repo root, on this machine (PyPI reachable)
# On the machine: bash bench/install_wheels_h200.sh, then PYTHONPATH=/tmp/site:$PWD.
# Python 3.12 x86-64 wheels of what that machine's image lacks (it has torch, numpy, pandas,
# pyarrow, nvidia-ml-py, aiohttp, grpcio, protobuf, click, pyyaml, requests, filelock, msgpack,
# tqdm, and httpx, jinja2, rich, typer, psutil and their dependencies): Ray, Optuna, SQLAlchemy,
# Alembic, pydantic, torchao (float8 training, 8-bit AdamW), the service's FastAPI stack and
# orjson. Ray is repacked without what neither a trial nor the coordinator imports (its Java jar,
# RLlib, its dashboard's web client, Ray Data, LLM, Tune, Train, Serve, AIR) and its binaries'
# symbol tables stripped (the dynamic symbols stay), recompressed with LZMA: 38 MB where Ray as
# published (79 MB) alone would be over the limit. The hf family's packages travel apart
# (bench/wheelhouse_hf.sh).
set -euo pipefail
dest=.whl
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo /.whl/ >> .git/info/exclude
mkdir -p "$dest"
get() {
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux1_x86_64 -d "$dest" "$@"
}
get "ray==${RAY_VERSION:-2.60.0}"
get optuna sqlalchemy alembic mako colorlog greenlet \
    jsonschema jsonschema-specifications referencing rpds-py \
    pydantic pydantic-core annotated-types typing-inspection \
    "torchao==${TORCHAO_VERSION:-0.18.0}"
get platformdirs fastapi starlette uvicorn orjson fastapi-offline
# Repacked with LZMA rather than deflate: 26 MB where deflate gives 35 MB (pip's zipfile reads
# both).
lzma_zip='
import os, sys, zipfile
with zipfile.ZipFile(sys.argv[1], "w", compression=zipfile.ZIP_LZMA) as z:
    for top in sys.argv[2:]:
        for root, _, files in os.walk(top):
            for f in files:
                z.write(os.path.join(root, f))
'
drop="jars rllib dashboard/client llm data tune train serve air"  # folders under ray/
strip="^ray/($(echo $drop | tr ' ' '|'))/"
for w in "$dest"/ray-*.whl; do
  w=$(cd "$(dirname "$w")" && pwd)/$(basename "$w")
  # grep reads the whole listing (no -q): an early exit would fail the pipe under pipefail.
  unzip -Z1 "$w" | grep -E "$strip" > /dev/null || continue
  tmp=$(mktemp -d)
  (cd "$tmp" && unzip -q "$w" && rm -rf $(printf 'ray/%s ' $drop) \
    && strip --strip-unneeded ray/_raylet.so ray/core/src/ray/gcs/gcs_server ray/core/src/ray/raylet/raylet \
    && grep -vE "$strip" ray-*.dist-info/RECORD > RECORD.new \
    && mv RECORD.new ray-*.dist-info/RECORD && rm -f "$w" \
    && python3 -c "$lzma_zip" "$w" ray ray-*.dist-info)
  rm -rf "$tmp"
done
du -sh "$dest"
