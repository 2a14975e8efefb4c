#!/usr/bin/env bash
# Mutation testing of the engine's core, time-bounded: cargo-mutants
# mutates crates/core/src/volume and crates/core/src/geometry one change at
# a time and runs the core and simulator suites against each mutant. A
# mutant no test notices ("missed") is code the tests cannot see. A
# recurring check (weekly, or before a release), not per-commit CI: one
# mutant costs a rebuild and both suites, about a minute on 2 cores.
#
#   bench/mutants.sh                                  # everything, 60 minutes
#   bench/mutants.sh --minutes 20 --file crates/core/src/volume/intent.rs
#   bench/mutants.sh --shard 2/8                      # one eighth of the mutants
#   bench/mutants.sh --iterate                        # skip what the last run caught
#   bench/mutants.sh --list                           # the mutants, without running
#
# Options: --minutes N (wall-time budget; the run is stopped cleanly when it
# is spent and the mutants not reached are listed), --file GLOB (repeatable;
# default: volume/*.rs and geometry/*.rs), --shard K/N, --timeout S (per
# mutant's test run; default: cargo-mutants' own, from the baseline),
# --seeds N (seeds per seeded simulator test, default 200: PLATTER_SIM_SEEDS),
# --jobs N (parallel builds and jobserver tasks, default 1), --out DIR
# (default target/mutants-out), --fail-fast (stop a mutant's test run at
# the first failing test target: a caught mutant then costs seconds, but
# the log names only the first target that caught it), --iterate, --list,
# --re REGEX (only the
# mutants whose name matches), --exclude-re REGEX, --no-baseline (skip
# the unmutated run; needs --timeout), --tests "ARGS" (cargo test target options,
# e.g. "--test=large_volumes --test=intent": a quick pass; each target
# must exist in every package tested, so pair it with --packages
# platter-core; a mutant it misses must be run again with the full suites
# before it counts as a survivor), --packages "LIST" (the packages whose
# tests run, default "platter-core platter-sim").
#
# Prints caught / missed / timeout / unviable counts, every surviving
# (missed) mutant, and the files whose mutants were all tested. Exits 2 when
# a mutant survived, 3 when the budget ran out first, 0 otherwise.
# docs/mutants.md lists the survivors of the last full run and why each is
# harmless or which test now kills it.
set -euo pipefail
cd "$(dirname "$0")/.."

minutes=60
files=()
shard=""
timeout=""
seeds=200
jobs=1
out=target/mutants-out
iterate=""
list=""
re=""
exclude_re=""
baseline=""
tests=""
packages="platter-core platter-sim"
fail_fast=""
while [ $# -gt 0 ]; do
    case "$1" in
        --minutes) minutes=$2; shift 2 ;;
        --file) files+=("$2"); shift 2 ;;
        --shard) shard=$2; shift 2 ;;
        --timeout) timeout=$2; shift 2 ;;
        --seeds) seeds=$2; shift 2 ;;
        --jobs) jobs=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --iterate) iterate=1; shift ;;
        --fail-fast) fail_fast=1; shift ;;
        --re) re=$2; shift 2 ;;
        --exclude-re) exclude_re=$2; shift 2 ;;
        --no-baseline) baseline=skip; shift ;;
        --tests) tests=$2; shift 2 ;;
        --packages) packages=$2; shift 2 ;;
        --list) list=1; shift ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
        *) echo "bench/mutants.sh: unknown option $1 (see --help)" >&2; exit 64 ;;
    esac
done
if [ ${#files[@]} -eq 0 ]; then
    files=("crates/core/src/volume/*.rs" "crates/core/src/geometry/*.rs")
fi

# cargo-mutants is a tool, not a dependency: installed here, never in
# Cargo.toml. The version is pinned so that runs list the same mutants.
want_version=27.1.0
if ! cargo mutants --version 2>/dev/null | grep -q "$want_version"; then
    echo "bench/mutants.sh: installing cargo-mutants $want_version" >&2
    cargo install --locked --version "$want_version" cargo-mutants
fi

args=(-p platter-core --jobs "$jobs" --jobserver-tasks "$jobs" --output "$out")
for p in $packages; do
    args+=(--test-package "$p")
done
for f in "${files[@]}"; do
    args+=(--file "$f")
done
[ -n "$shard" ] && args+=(--shard "$shard")
[ -n "$timeout" ] && args+=(--timeout "$timeout")
[ -n "$iterate" ] && args+=(--iterate)
[ -n "$re" ] && args+=(--re "$re")
[ -n "$exclude_re" ] && args+=(--exclude-re "$exclude_re")
[ -n "$baseline" ] && args+=(--baseline "$baseline")
# Every test target runs even after one fails (the log then says which
# tests kill the mutant) unless --fail-fast; --tests narrows them for a
# quick pass.
[ -z "$fail_fast" ] && args+=(--cargo-test-arg=--no-fail-fast)
# The targets narrow the build as well as the run (`--cargo-arg` reaches
# `cargo test --no-run` too): a mutant then links only the binaries it
# runs, about half the cost of building every target of the package.
for t in $tests; do
    args+=("--cargo-arg=$t")
done

if [ -n "$list" ]; then
    exec cargo mutants --list "${args[@]}"
fi

# Each build runs on one job unless told otherwise (the machine is shared).
# With one job, builds share a target directory of their own: the copy
# cargo-mutants builds in would otherwise wait on the lock of the main one,
# or rebuild everything. With several, each copy keeps its own (cargo
# holds a target directory's lock for the whole test run, so a shared one
# would run the mutants one at a time).
export CARGO_BUILD_JOBS=$jobs
if [ "$jobs" -le 1 ]; then
    export CARGO_TARGET_DIR=${CARGO_TARGET_DIR_MUTANTS:-$PWD/target/mutants}
else
    unset CARGO_TARGET_DIR
fi
# A mutant's build is mostly linking some twenty test binaries: mold and no
# debug info make it about a third faster (the tests run the same code).
if command -v mold >/dev/null; then
    export RUSTFLAGS="${RUSTFLAGS:-} -C link-arg=-fuse-ld=mold"
fi
export CARGO_PROFILE_DEV_DEBUG=0 CARGO_PROFILE_TEST_DEBUG=0
export PLATTER_SIM_SEEDS=$seeds
mkdir -p "$out"
all=$(mktemp)
trap 'rm -f "$all"' EXIT
cargo mutants --list "${args[@]}" >"$all" 2>/dev/null

echo "bench/mutants.sh: $(wc -l <"$all") mutants in ${files[*]}${shard:+ (shard $shard)}, budget $minutes min" >&2
status=0
timeout --signal=INT --kill-after=120 "$((minutes * 60))" \
    cargo mutants "${args[@]}" --no-shuffle || status=$?
# cargo-mutants: 0 all caught, 2 some missed, 3 some timed out, 4 the
# baseline failed; 124/130 from timeout when the budget ran out.
r="$out/mutants.out"
count() { if [ -f "$r/$1" ]; then wc -l <"$r/$1"; else echo 0; fi; }
caught=$(count caught.txt)
missed=$(count missed.txt)
timeouts=$(count timeout.txt)
unviable=$(count unviable.txt)
tested=$((caught + missed + timeouts + unviable))
echo
echo "caught $caught, missed $missed, timeouts $timeouts, unviable $unviable ($tested of $(wc -l <"$all") mutants tested)"
if [ "$missed" -gt 0 ]; then
    echo "surviving mutants:"
    sed 's/^/  /' "$r/missed.txt"
fi
if [ "$timeouts" -gt 0 ]; then
    echo "timed out (counted as caught by cargo-mutants; look at them):"
    sed 's/^/  /' "$r/timeout.txt"
fi
# Files whose every mutant was tested, and the rest.
done_list=$(mktemp)
cat "$r"/caught.txt "$r"/missed.txt "$r"/timeout.txt "$r"/unviable.txt 2>/dev/null >"$done_list" || true
echo "files:"
cut -d: -f1 "$all" | sort -u | while read -r f; do
    n=$(grep -c "^$f:" "$all")
    d=$(grep -c "^$f:" "$done_list" || true)
    if [ "$d" -ge "$n" ]; then
        echo "  $f: all $n tested"
    else
        echo "  $f: $d of $n tested"
    fi
done
rm -f "$done_list"
case $status in
    124|130|137) echo "bench/mutants.sh: the $minutes-minute budget ran out" >&2; exit 3 ;;
    0) exit 0 ;;
    2) exit 2 ;;
    3) exit 2 ;;
    *) echo "bench/mutants.sh: cargo mutants exited with $status" >&2; exit "$status" ;;
esac
