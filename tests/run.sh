#!/usr/bin/env bash
# Runs every tests/test_*.sh against the installed extension; each starts its own cluster.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
failed=()
for test in tests/test_*.sh; do
    printf '%s ... ' "$test"
    started=$SECONDS
    if output="$(bash "$test" 2>&1)"; then
        echo "ok ($((SECONDS - started)) s)"
    else
        echo "FAILED"
        printf '%s\n' "$output" | tail -n 40 | sed 's/^/    /'
        failed+=("$test")
    fi
done
if [ "${#failed[@]}" -gt 0 ]; then
    echo "failed: ${failed[*]}"
    exit 1
fi
