#!/usr/bin/env bash
# The cost of per-block checksums (`platter create --checksums`): each
# level is served four times in the same run, without checksums (plain),
# with bare pages (the layout before label format 7, `--checksum-pages
# bare`), with sealed pages (`--checksum-records off`) and with sealed pages
# and write records (the default), and every figure is a throughput over
# the plain one's (1.00 = free); `records/bare` is what catching zeroed
# pages and dropped writes costs against the old layout. See
# bench/README.md and docs/performance.md ("Checksums").
#
#   bench/checksums.sh [--runs N] [--runtime SECS] [--latency T|none]
#                      [--algorithm crc32c|xxh3] [--platter BIN] [--out DIR]
#                      [--dir DIR]
#
# Volumes (64 MiB members on tmpfs; the write-intent bitmap on, as
# checksums need it): mirror over 2 members and raid5 over 4 at 64k, each
# as `plain`, `bare`, `sealed` and `records`. Every member is given
# --inject latency=T (default none: tmpfs speed; 2ms models a disk or a
# remote host).
# Jobs (fio nbd engine, 48 MiB span, iodepth 8): 1M sequential write and
# read, 4k random write and read, and 4k random writes each followed by a
# flush (fsync=1: where write records cost). The variants alternate within
# each run; the table shows, per level and job, the median over the runs
# of each variant's IOPS over plain's, and of records over bare.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

RUNS=3
RUNTIME=5
LATENCY=none
ALGORITHM=crc32c
OUT=""
PLATTER=""
MEMBER_DIR=""

bench_option() {
    case "$1" in
        --algorithm) ALGORITHM="$2" ;;
        *) return 1 ;;
    esac
}

bench_options "$@"
case "$ALGORITHM" in crc32c|xxh3) ;; *) die "--algorithm wants crc32c or xxh3" ;; esac

bench_setup checksums

SERVE_ARGS=()
inject=none
[ "$LATENCY" = none ] || inject="latency=$LATENCY"
echo "== volumes: every member given ${inject}"
VARIANTS=(plain bare sealed records)
declare -A CREATE=(
    [plain]=""
    [bare]="--checksums $ALGORITHM --checksum-pages bare"
    [sealed]="--checksums $ALGORITHM --checksum-records off"
    [records]="--checksums $ALGORITHM"
)
for v in "${VARIANTS[@]}"; do
    # shellcheck disable=SC2086 # the options split into words on purpose
    serve "mirror-$v" mirror 2 64k "$inject" ${CREATE[$v]}
    # shellcheck disable=SC2086
    serve "raid5-$v" raid5 4 64k "$inject" ${CREATE[$v]}
done

# name: rw bs fsync
declare -A JOB=(
    [seq-write]="write 1M 0"
    [seq-read]="read 1M 0"
    [rand-write]="randwrite 4k 0"
    [rand-read]="randread 4k 0"
    [sync-write]="randwrite 4k 1"
)
ORDER=(seq-write seq-read rand-write rand-read sync-write)

{
    bench_machine
    echo "members:   latency $LATENCY; checksums $ALGORITHM; $RUNS runs of ${RUNTIME} s per job"
} | tee "$OUT/environment.txt"

for run in $(seq 1 "$RUNS"); do
    for level in mirror raid5; do
        for job in "${ORDER[@]}"; do
            read -r rw bs fsync <<<"${JOB[$job]}"
            for v in "${VARIANTS[@]}"; do
                server="$level-$v"
                kill -0 "${PID[$server]}" 2>/dev/null || die "$server died: $(tail -n 5 "$OUT/$server.log")"
                echo "== run $run/$RUNS: $level $job on $v"
                # Reads follow the writes, so they read written blocks
                # (their checksums are real, not the unwritten zeros).
                fio --name=job --ioengine=nbd "--uri=${URI[$server]}" "--rw=$rw" "--bs=$bs" \
                    "--fsync=$fsync" --iodepth=8 --numjobs=1 --size=48M --time_based \
                    "--runtime=$RUNTIME" \
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
def ratio(level, job, top, bottom):
    rs = [iops(f"{level}-{top}", job, k) / iops(f"{level}-{bottom}", job, k)
          for k in range(1, runs + 1)]
    return statistics.median(rs), rs
print()
print("| level | job | plain (IOPS, median) | bare / plain | sealed / plain | records / plain "
      "| records / bare (runs) |")
print("|---|---|---|---|---|---|---|")
for level in ("mirror", "raid5"):
    for job in ("seq-write", "seq-read", "rand-write", "rand-read", "sync-write"):
        plain = statistics.median(iops(f"{level}-plain", job, k) for k in range(1, runs + 1))
        cells = [f"{ratio(level, job, v, 'plain')[0]:.2f}" for v in ("bare", "sealed", "records")]
        m, rs = ratio(level, job, "records", "bare")
        print(f"| {level} | {job} | {plain:,.0f} | " + " | ".join(cells)
              + f" | {m:.2f} (" + ", ".join(f"{r:.2f}" for r in rs) + ") |")
EOF
echo "results in $OUT"
