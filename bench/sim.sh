#!/bin/sh
# The simulator's speed: simulated member I/Os per second of wall time on
# one core, for 4 KiB random reads and writes from 32 processes on a
# 4-member stripe of SimpleLatency members (crates/sim/examples/sim_speed.rs).
# Prints each round and the median; fails below 1,000,000 (issue 7).
#
#   bench/sim.sh                  # 2,000,000 requests, 5 rounds: about 6 s
#   bench/sim.sh 5000000 9        # longer, more rounds on a noisy machine
set -eu
cd "$(dirname "$0")/.."
requests=${1:-2000000}
rounds=${2:-5}
out=$(cargo run --quiet --release -p platter-sim --example sim_speed -- "$requests" "$rounds")
echo "$out"
median=$(echo "$out" | sed -n 's/^median: \([0-9]*\) .*/\1/p')
if [ "${median:-0}" -lt 1000000 ]; then
    echo "bench/sim.sh: median $median member I/Os per second is under 1,000,000" >&2
    exit 1
fi
