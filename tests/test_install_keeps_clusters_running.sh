# Reinstalling the extension, as `make test` does twice (cargo pgrx test's harness, then
# install_extension), never crashes a running cluster that has the library loaded: its
# postmaster, a session open across the reinstall and a new session all keep working
# (issue 10, item 6). An in-place rewrite of the mapped library fails this test.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO"
dp='SELECT dp_argmax(x, 1, 1.0) BETWEEN 1 AND 10 FROM generate_series(1, 10) x'
library="$("$PG_CONFIG" --pkglibdir)/pg_exp_mech.so"

# in_session SQL: runs SQL (one statement, one row) in the open session; prints its output.
in_session() {
    local seen; seen="$(wc -l <"$CLUSTER/session.out")"
    echo "$1;" >&3
    for _ in $(seq 100); do
        [ "$(wc -l <"$CLUSTER/session.out")" -gt "$seen" ] && break
        kill -0 "$session" 2>/dev/null || break
        sleep 0.1
    done
    tail -n +"$((seen + 1))" "$CLUSTER/session.out"
}

# survives NAME COMMAND...: a fresh cluster, which maps the library installed now, lives
# through COMMAND. Each reinstall gets its own cluster: only a file that a running process
# mapped can crash it when rewritten.
survives() {
    local name="$1" postmaster backend; shift
    new_cluster "install_keeps_clusters_running"
    assert_eq "$(sql -c "$dp")" t "$name: a DP query before"
    postmaster="$(head -n 1 "$CLUSTER/data/postmaster.pid")"
    # A session open across the reinstall: psql reading statements from a fifo.
    mkfifo "$CLUSTER/session.in"
    sql <"$CLUSTER/session.in" >"$CLUSTER/session.out" 2>&1 &
    session=$!
    exec 3>"$CLUSTER/session.in"
    trap 'exec 3>&-; wait "$session" || true; stop_cluster "$CLUSTER"' EXIT
    backend="$(in_session 'SELECT pg_backend_pid()')"
    assert_eq "$(in_session "SELECT pg_backend_pid(), ($dp)")" "$backend|t" "$name: the open session before"

    "$@"

    assert_eq "$(head -n 1 "$CLUSTER/data/postmaster.pid")" "$postmaster" "$name: postmaster PID"
    assert_eq "$(in_session "SELECT pg_backend_pid(), ($dp)")" "$backend|t" "$name: the open session"
    assert_eq "$(sql -c "$dp")" t "$name: a new session"
    # A crashed backend makes the postmaster reinitialise under the same PID: the log tells.
    ! grep -q "terminated by signal" "$CLUSTER/server.log" \
        || fail "$name: a server process crashed:\n$(grep -A1 'terminated by signal' "$CLUSTER/server.log")"
    # The postmaster still maps the file it loaded, now unlinked: not rewritten in place.
    grep -q "$library (deleted)\$" "/proc/$postmaster/maps" \
        || fail "$name: the postmaster's library was rewritten in place, not replaced"
    exec 3>&-
    wait "$session" || true
    stop_cluster "$CLUSTER"
    echo "$name: the cluster kept running"
}

# pgrx-tests installs with `$CARGO_PGRX pgrx install --test ... --sudo` (scripts/test.sh).
survives "cargo pgrx test's install" "$REPO/scripts/cargo-pgrx-by-rename.sh" \
    pgrx install --test --pg-config "$PG_CONFIG" --sudo --no-default-features --features "$PG_FEATURE pg_test"
# make test's own install (make demo's is the same in release).
survives "install_extension" install_extension debug
