#!/usr/bin/env bash
# The cargo-pgrx that `cargo pgrx test` hands to its test harness (scripts/test.sh sets
# CARGO_PGRX to this script). pgrx-tests 0.18.1 installs the extension with
# `$CARGO_PGRX pgrx install --test ...`; with --runas that gets --sudo, which copies each
# file with `sudo cp`, rewriting the installed library in place: running clusters that
# mapped it crash. Here that install becomes `cargo pgrx package` plus place_package
# (common.sh: rename, never in place); any other command goes to cargo-pgrx unchanged.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
unset CARGO_PGRX   # cargo-pgrx would hand this script on to its own children
[ "${1:-}" = pgrx ] && shift
if [ "${1:-}" != install ]; then
    exec cargo pgrx "$@"
fi
shift
# install defaults to debug, package to release; package has no --sudo (as_root does that).
args=() profile=(--debug)
for arg in "$@"; do
    case "$arg" in
        --sudo) ;;
        --release) profile=() ;;
        --profile) profile=(); args+=("$arg") ;;
        *) args+=("$arg") ;;
    esac
done
package_and_place test "${args[@]}" "${profile[@]}"
