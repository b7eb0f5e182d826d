#!/usr/bin/env bash
# A carried wheelhouse into a site folder, once per machine and wheel set: a warm machine keeps
# /tmp between device calls, and a changed wheel set is installed again.
#   bash bench/install_wheels_h200.sh                      # .whl into /tmp/site
#   bash bench/install_wheels_h200.sh .whl-hf /tmp/site-hf  # the hf wheelhouse (wheelhouse_hf.sh)
set -euo pipefail
wheels=${1:-.whl} site=${2:-/tmp/site}
stamp=$site/.wheels-$(ls "$wheels" | md5sum | cut -c1-12)
[ -f "$stamp" ] && exit 0
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target "$site" "$wheels"/*.whl
touch "$stamp"
