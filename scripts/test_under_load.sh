#!/usr/bin/env bash
# Run the test suite with every CPU busy, until it is green K times in a row.
#
#   scripts/test_under_load.sh [K]        # K defaults to 3
#
# Starts `stress-ng --cpu N` (N = 2 x nproc; installed with apt-get if missing) in the
# background, killed on exit, then runs `cargo test --release` K times, each followed by
# `SEGSTORE_KILL_POINTS=$KILL_POINTS cargo test --release --test crash_kill_lifecycle`
# (KILL_POINTS defaults to 30; set it to 0 to skip that part). Stops at the first
# failure, says which run and which command failed, and exits non-zero; the output of
# each run goes to $LOG_DIR (default target/test-under-load/). A test that fails here
# but passes on an idle machine depends on the scheduler: fix the test.
#
# Environment: STRESS_CPUS (default 2 x nproc), KILL_POINTS (default 30), LOG_DIR.
set -euo pipefail

runs="${1:-3}"
case "$runs" in
'' | *[!0-9]* | 0)
    echo "usage: $0 [K]  (K: runs that must be green in a row, a positive number; got '$runs')" >&2
    exit 2
    ;;
esac
cpus="${STRESS_CPUS:-$((2 * $(nproc)))}"
kill_points="${KILL_POINTS:-30}"
cd "$(dirname "$0")/.."
log_dir="${LOG_DIR:-target/test-under-load}"
mkdir -p "$log_dir"

if ! command -v stress-ng >/dev/null; then
    echo "stress-ng missing: installing it with apt-get" >&2
    sudo_cmd=""
    if [ "$(id -u)" -ne 0 ]; then sudo_cmd="sudo"; fi
    $sudo_cmd apt-get install -y stress-ng || {
        $sudo_cmd apt-get update && $sudo_cmd apt-get install -y stress-ng
    }
fi

# Build first, without load, so the runs measure the tests and not the compiler.
cargo test --release --workspace --no-run

stress-ng --cpu "$cpus" --timeout 0 --quiet &
stress_pid=$!
# SIGTERM to stress-ng ends its workers too. INT and TERM exit, which runs the EXIT trap.
trap 'kill "$stress_pid" 2>/dev/null || true; wait "$stress_pid" 2>/dev/null || true' EXIT
trap 'exit 130' INT TERM
echo "stress-ng --cpu $cpus running (pid $stress_pid) on $(nproc) CPUs"

run() { # run LABEL LOG COMMAND...
    local label="$1" log="$2"
    shift 2
    local t0=$SECONDS
    if "$@" >"$log" 2>&1; then
        echo "  $label: ok in $((SECONDS - t0)) s"
    else
        echo "FAILED: $label after $((SECONDS - t0)) s: $*" >&2
        grep -E "^test .* FAILED|panicked at|^---- " "$log" | head -n 20 >&2 || true
        echo "full output: $log" >&2
        exit 1
    fi
}

for i in $(seq 1 "$runs"); do
    echo "run $i of $runs"
    run "run $i: cargo test --release" "$log_dir/run$i-suite.log" cargo test --release --workspace
    if [ "$kill_points" -gt 0 ]; then
        run "run $i: SEGSTORE_KILL_POINTS=$kill_points crash_kill_lifecycle" \
            "$log_dir/run$i-kill.log" \
            env SEGSTORE_KILL_POINTS="$kill_points" cargo test --release --test crash_kill_lifecycle
    fi
done
echo "green $runs times in a row under stress-ng --cpu $cpus"
