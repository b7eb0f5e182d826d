#!/usr/bin/env bash
# A tune that outlasts one device call (10 minutes a command): started in its own process
# session, which the device machine lets run on between calls while it stays warm (30 s), and
# collected by the next call.
#   bash bench/tune_bg_h200.sh start NAME WAIT_S MODEL SPACE MINUTES [tune flags...]
#   bash bench/tune_bg_h200.sh wait NAME WAIT_S      # then copies its files to $OUT when done
#   PARTIAL=1 bash bench/tune_bg_h200.sh wait ...     # also what it has so far, if not done
#                                                    # (`start` does so unless PARTIAL=)
# Both wait up to WAIT_S seconds for the tune to end; `wait` must follow within the machine's
# warm time, or the tune is lost with the machine.
set -euo pipefail
verb=$1 name=$2 wait_s=$3
shift 3
dir=/tmp/tune-bg-$name
if [ "$verb" = start ]; then
  # The call that starts a tune brings back what it has so far unless told not to: if the next
  # call comes after the machine's 30 s idle, the tune is gone with it (2026-12-04).
  PARTIAL=${PARTIAL-1}
  mkdir -p "$dir"
  bash bench/install_wheels_h200.sh
  RESULTS=$dir NAME=$name setsid nohup bash bench/tune_h200.sh "$@" \
    > "$dir/runner.log" 2>&1 < /dev/null &
  echo $! > "$dir/pid"
fi
pid=$(cat "$dir/pid")
end=$((SECONDS + wait_s))
while kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $end ]; do sleep 2; done
if kill -0 "$pid" 2>/dev/null; then
  echo "tune $name still running after ${wait_s}s; collect it with: bench/tune_bg_h200.sh wait $name N"
  tail -5 "$dir/tune-$name.log" 2>/dev/null || true
  # What it has so far comes back too, in case no later call can collect it (the session's
  # device time ran out): the log and a consistent copy of the database, taken mid-write.
  if [ -n "${PARTIAL:-}" ]; then
    cp "$dir/tune-$name.log" "$OUT/partial-tune-$name.log" 2>/dev/null || true
    python3 -c "import sqlite3,sys; s=sqlite3.connect(sys.argv[1]); d=sqlite3.connect(sys.argv[2]); s.backup(d)" \
      "$dir/tune-$name.db" "$OUT/partial-tune-$name.db" 2>/dev/null || true
  fi
  exit 0
fi
echo "tune $name ended"; tail -40 "$dir/runner.log"
cp "$dir"/*.db "$dir"/*.json "$dir"/*.log "$dir"/*.csv "$OUT"/ 2>/dev/null || true
