#!/usr/bin/env bash
# The wheelhouse (.whl) the lent H200 machine needs, sized to travel: the tree and `.whl`
# together must stay under the device tool's 64 MiB.
#   bash bench/wheelhouse.sh            # from the repo root, on this machine (PyPI reachable)
# On top of ../shared/device/make-wheelhouse.sh: orjson (storage/session.py imports it), minus
# what the machine's image has already (shared/device/README.md, KINDS.md's package list), and
# Ray repacked without what neither a trial nor the coordinator imports (its dashboard's web
# client, Ray Data, Ray LLM, Tune, Train, Serve, AIR) and its binaries' symbol tables stripped
# (the dynamic symbols stay), recompressed with LZMA: 38 MB where the script alone gives 58 MB,
# which with the tree (18 MB on 2026-12-04) is over the limit.
set -euo pipefail
dest=.whl
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo /.whl/ >> .git/info/exclude
../shared/device/make-wheelhouse.sh "$dest"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d "$dest" orjson
# On the machine already (its image): never installed over it.
for name in httpx httpcore h11 anyio sniffio jinja2 markupsafe rich typer shellingham psutil; do
  rm -f "$dest"/"$name"-*.whl
done
# Repacked with LZMA rather than deflate: 26 MB where deflate gives 35 MB (pip's zipfile reads
# both); on 2026-12-04 the tree (18 MB) and a deflated wheelhouse were over the 64 MiB.
lzma_zip='
import os, sys, zipfile
with zipfile.ZipFile(sys.argv[1], "w", compression=zipfile.ZIP_LZMA) as z:
    for top in sys.argv[2:]:
        for root, _, files in os.walk(top):
            for f in files:
                z.write(os.path.join(root, f))
'
drop="dashboard/client llm data tune train serve air"  # folders under ray/
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
