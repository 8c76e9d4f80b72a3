#!/usr/bin/env bash
# Start-up time with a long ledger history (README: Operations). A throwaway cluster gets
# a ledger of N charge lines (default 10^6) of 100 roles, written as a release before the
# WAL-logged ledger wrote them (no snapshot, no LSN). Then it is started 3 times:
#   1. no snapshot: every line is read and replayed (what every start-up did before), and
#      a snapshot is written;
#   2. and 3. the snapshot and the lines after it.
# Prints the server's own figure (the "loaded ... in X ms" log line) and the wall time of
# pg_ctl start. Uses the installed extension.
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/common.sh"
LINES="${1:-1000000}"
DIR="${PG_EXP_MECH_BENCH_DIR:-/tmp/pg_exp_mech-bench}/ledger_startup"
PORT="$(free_port 57432)"
start_cluster "$DIR" "$PORT"
trap 'stop_cluster "$DIR"' EXIT
stop_cluster "$DIR"
as_owner mkdir -p "$DIR/data/pg_exp_mech"
as_owner python3 - "$LINES" "$DIR/data/pg_exp_mech/ledger" <<'PY'
import sys
lines, path = int(sys.argv[1]), sys.argv[2]
with open(path, "w") as ledger:
    for role in range(100):
        ledger.write(f"limit\t0\t{20000 + role}\t1000000.0\t0.0\n")
    for i in range(lines):
        ledger.write(f"charge\t{i}\t{20000 + i % 100}\t0.25\t0.0\tdp_argmax\t00000000000000ff\n")
PY
as_owner rm -f "$DIR/data/pg_exp_mech/snapshot"
echo "ledger: $(wc -l <"$DIR/data/pg_exp_mech/ledger") lines, $(du -h "$DIR/data/pg_exp_mech/ledger" | cut -f1)"
for run in 1 2 3; do
    started=$(date +%s%N)
    as_owner env -u RUST_BACKTRACE "$(pg_bindir)/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w start >/dev/null
    wall=$(( ($(date +%s%N) - started) / 1000000 ))
    loaded="$(grep -o 'pg_exp_mech: loaded .*' "$DIR/server.log" | tail -1)"
    snapshot="no snapshot"; [ -f "$DIR/data/pg_exp_mech/snapshot" ] && snapshot="snapshot written"
    echo "start $run: pg_ctl start ${wall} ms; $loaded; $snapshot"
    stop_cluster "$DIR"
done
