#!/usr/bin/env bash
# The second wheelhouse (.whl-hf) for the lent GPU machine: what the `hf` family and the
# `kernels` knob need there (transformers and its dependencies, Liger-Kernel, cut-cross-entropy)
# plus what a trial process imports beside torch (pydantic, torchao). It travels apart from .whl (Ray, Optuna,
# the control plane): the tree and both together are over the device tool's 64 MiB.
#   bash bench/wheelhouse_hf.sh        # from the repo root, on this machine (PyPI reachable)
# On the machine, once per machine: bash bench/install_wheels_h200.sh .whl-hf /tmp/site-hf
# The versions are this checkout's venv's, so CPU tests and GPU runs build the same models.
set -euo pipefail
dest=.whl-hf
grep -qx '/.whl-hf/' .git/info/exclude 2>/dev/null || echo /.whl-hf/ >> .git/info/exclude
mkdir -p "$dest"
version() { .venv/bin/python -c "import importlib.metadata as m; print(m.version('$1'))"; }
pins=()
for name in transformers tokenizers huggingface-hub safetensors hf-xet regex kernels tomlkit \
    httpx2 httpcore2 h11 anyio idna truststore fsspec typer annotated-doc shellingham \
    pydantic pydantic-core annotated-types typing-inspection torchao; do
  pins+=("$name==$(version "$name")")
done
pins+=("liger-kernel==${LIGER_VERSION:-0.8.5}")
# kernels=cce: Apple's cut-cross-entropy (pure Python over Triton, like Liger).
pins+=("cut-cross-entropy==${CCE_VERSION:-25.1.1}")
# --no-deps: liger-kernel, cut-cross-entropy and torchao would otherwise bring torch and Triton, which the
# machine has.
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d "$dest" "${pins[@]}"
du -sh "$dest"
