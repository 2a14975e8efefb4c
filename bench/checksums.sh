#!/usr/bin/env bash
# The cost of per-block checksums (`platter create --checksums`): each
# volume is served twice in the same run, with and without checksums, and
# every figure is the checksummed volume's throughput over the plain one's
# (1.00 = free). See bench/README.md and docs/performance.md ("Checksums").
#
#   bench/checksums.sh [--runs N] [--runtime SECS] [--latency T|none]
#                      [--algorithm crc32c|xxh3] [--platter BIN] [--out DIR]
#                      [--dir DIR]
#
# Volumes (64 MiB members on tmpfs; the write-intent bitmap on, as
# checksums need it): mirror over 2 members and raid5 over 4 at 64k, each
# as `plain` and `sums`. Every member is given --inject latency=T (default
# none: tmpfs speed; 2ms models a disk or a remote host).
# Jobs (fio nbd engine, 48 MiB span, iodepth 8): 1M sequential write and
# read, 4k random write and read. The jobs alternate plain / sums within
# each run; the table shows, per level and job, the median over the runs
# of sums / plain (IOPS), and each run's ratio.
set -euo pipefail

RUNS=3
RUNTIME=5
LATENCY=none
ALGORITHM=crc32c
OUT=""
PLATTER=""
MEMBER_DIR=""

usage() {
    sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'
    exit "${1:-0}"
}

while [ $# -gt 0 ]; do
    case "$1" in
        --runs) RUNS="$2"; shift 2 ;;
        --runtime) RUNTIME="$2"; shift 2 ;;
        --latency) LATENCY="$2"; shift 2 ;;
        --algorithm) ALGORITHM="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        --platter) PLATTER="$2"; shift 2 ;;
        --dir) MEMBER_DIR="$2"; shift 2 ;;
        -h|--help) usage 0 ;;
        *) echo "checksums.sh: unknown argument: $1" >&2; usage 2 >&2 ;;
    esac
done

die() { echo "checksums.sh: $*" >&2; exit 1; }
case "$RUNS" in ''|*[!0-9]*|0) die "--runs wants a positive integer" ;; esac
case "$RUNTIME" in ''|*[!0-9]*|0) die "--runtime wants a positive number of seconds" ;; esac
case "$LATENCY" in none|*[0-9]us|*[0-9]ms|*[0-9]s) ;; *) die "--latency wants none or a time with a unit: 500us, 2ms" ;; esac
case "$ALGORITHM" in crc32c|xxh3) ;; *) die "--algorithm wants crc32c or xxh3" ;; esac

. "$(dirname "$0")/lib.sh"
bench_setup checksums

SERVE_ARGS=()
inject=none
[ "$LATENCY" = none ] || inject="latency=$LATENCY"
echo "== volumes: every member given ${inject}"
serve mirror-plain mirror 2 64k "$inject"
serve mirror-sums mirror 2 64k "$inject" --checksums "$ALGORITHM"
serve raid5-plain raid5 4 64k "$inject"
serve raid5-sums raid5 4 64k "$inject" --checksums "$ALGORITHM"

# name: rw bs
declare -A JOB=(
    [seq-write]="write 1M"
    [seq-read]="read 1M"
    [rand-write]="randwrite 4k"
    [rand-read]="randread 4k"
)
ORDER=(seq-write seq-read rand-write rand-read)

{
    echo "date:      $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "host:      $(uname -srm), $(nproc) CPUs"
    echo "load:      $(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min, at start)"
    echo "fio:       $(fio --version)"
    echo "platter:   $PLATTER, $("$PLATTER" --version)"
    echo "members:   latency $LATENCY; checksums $ALGORITHM; $RUNS runs of ${RUNTIME} s per job"
} | tee "$OUT/environment.txt"

for run in $(seq 1 "$RUNS"); do
    for level in mirror raid5; do
        for job in "${ORDER[@]}"; do
            read -r rw bs <<<"${JOB[$job]}"
            for v in plain sums; do
                server="$level-$v"
                kill -0 "${PID[$server]}" 2>/dev/null || die "$server died: $(tail -n 5 "$OUT/$server.log")"
                echo "== run $run/$RUNS: $level $job on $v"
                # Reads follow the writes, so they read written blocks
                # (their checksums are real, not the unwritten zeros).
                fio --name=job --ioengine=nbd "--uri=${URI[$server]}" "--rw=$rw" "--bs=$bs" \
                    --iodepth=8 --numjobs=1 --size=48M --time_based "--runtime=$RUNTIME" \
                    --randrepeat=0 --output-format=json \
                    "--output=$OUT/$server-$job-$run.json" >/dev/null
            done
        done
    done
done

python3 - "$OUT" "$RUNS" <<'EOF' | tee "$OUT/summary.txt"
import json, statistics, sys
out, runs = sys.argv[1], int(sys.argv[2])
def iops(server, job, run):
    j = json.load(open(f"{out}/{server}-{job}-{run}.json"))["jobs"][0]
    side = j["read"] if j["read"]["io_bytes"] else j["write"]
    return side["iops"]
print()
print("| level | job | plain (IOPS, median) | with checksums | ratio (median) | runs |")
print("|---|---|---|---|---|---|")
for level in ("mirror", "raid5"):
    for job in ("seq-write", "seq-read", "rand-write", "rand-read"):
        plain = [iops(f"{level}-plain", job, k) for k in range(1, runs + 1)]
        sums = [iops(f"{level}-sums", job, k) for k in range(1, runs + 1)]
        ratios = [s / p for s, p in zip(sums, plain)]
        print(f"| {level} | {job} | {statistics.median(plain):,.0f} | "
              f"{statistics.median(sums):,.0f} | {statistics.median(ratios):.2f} | "
              + ", ".join(f"{r:.2f}" for r in ratios) + " |")
EOF
echo "results in $OUT"
