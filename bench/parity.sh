#!/usr/bin/env bash
# Parity speed against memcpy of the same bytes, in the same run. See
# bench/README.md.
#
#   bench/parity.sh [ROUNDS]
#
# Runs crates/parity/examples/parity_bench.rs (release) and checks the
# floors of issue 6: XOR at least 0.9x memcpy and P+Q generation at least
# 0.7x, for every shape; two-block RAID-6 recovery is reported. Exits 1 if
# a floor is missed.

set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS="${1:-9}"
out="$(cargo run --quiet --release -p platter-parity --example parity_bench -- "$ROUNDS")"
echo "$out"
echo "$out" | awk '
    /^backend:/ { backend = $2 }
    $1 ~ /\+2$/ {
        xor = $5 + 0; pq = $6 + 0
        if (xor < 0.9) { printf "FAIL: %s x %s: XOR %.2fx memcpy, floor 0.9x\n", $2, $3, xor; bad = 1 }
        if (pq < 0.7) { printf "FAIL: %s x %s: P+Q %.2fx memcpy, floor 0.7x\n", $2, $3, pq; bad = 1 }
    }
    END {
        if (backend != "isa-l") { print "note: backend is " backend ", not ISA-L (install libisal-dev)" }
        if (bad) exit 1
        print "ok: XOR >= 0.9x and P+Q >= 0.7x memcpy for every shape"
    }'
