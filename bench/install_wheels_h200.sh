#!/usr/bin/env bash
# The carried wheelhouse (.whl) into /tmp/site, once per machine and wheel set: a warm machine
# keeps /tmp between device calls, and a changed wheel set is installed again.
set -euo pipefail
stamp=/tmp/site/.wheels-$(ls .whl | md5sum | cut -c1-12)
[ -f "$stamp" ] && exit 0
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl
touch "$stamp"
