#!/usr/bin/env bash
# The cost of the partial parity log (`platter create --consistency-policy
# ppl`): each volume is served twice in the same run, with the log and
# without (the write-intent bitmap's resync alone), and every figure is the
# logged volume's throughput over the plain one's (1.00 = free). See
# bench/README.md and docs/performance.md ("The partial parity log").
#
#   bench/ppl.sh [--runs N] [--runtime SECS] [--latency T|none]
#                [--platter BIN] [--out DIR] [--dir DIR]
#
# Volumes (64 MiB members on tmpfs, the default stripe cache): raid5 over
# 4 members and raid6 over 5 at 64k, each as `plain` and `ppl`. Every
# member is given --inject latency=T (default none: tmpfs speed; 2ms
# models a disk or a remote host).
# Jobs (fio nbd engine, 48 MiB span, iodepth 8): 1M sequential write (full
# stripes: nothing to log), 64k sequential write (partial stripes that the
# cache completes), 4k random write (partial stripes: a record each) and
# 4k random read (no log at all: a control). The jobs alternate plain / ppl
# within each run; the table shows, per level and job, the median over the
# runs of ppl / plain (IOPS), each run's ratio, and the log's records and
# clearing flushes per 1,000 writes (from `platter stats`).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

RUNS=3
RUNTIME=5
LATENCY=none
OUT=""
PLATTER=""
MEMBER_DIR=""

bench_options "$@"
bench_setup ppl

SERVE_ARGS=()
inject=none
[ "$LATENCY" = none ] || inject="latency=$LATENCY"
echo "== volumes: every member given ${inject}"
serve raid5-plain raid5 4 64k "$inject"
serve raid5-ppl raid5 4 64k "$inject" --consistency-policy ppl
serve raid6-plain raid6 5 64k "$inject"
serve raid6-ppl raid6 5 64k "$inject" --consistency-policy ppl

# name: rw bs
declare -A JOB=(
    [seq-write]="write 1M"
    [seq-write-64k]="write 64k"
    [rand-write]="randwrite 4k"
    [rand-read]="randread 4k"
)
ORDER=(seq-write seq-write-64k rand-write rand-read)

{
    bench_machine
    echo "members:   latency $LATENCY; $RUNS runs of ${RUNTIME} s per job"
} | tee "$OUT/environment.txt"

for run in $(seq 1 "$RUNS"); do
    for level in raid5 raid6; do
        for job in "${ORDER[@]}"; do
            read -r rw bs <<<"${JOB[$job]}"
            for v in plain ppl; do
                server="$level-$v"
                kill -0 "${PID[$server]}" 2>/dev/null || die "$server died: $(tail -n 5 "$OUT/$server.log")"
                echo "== run $run/$RUNS: $level $job on $v"
                "$PLATTER" stats --json --control "$WORK/$server/sock.ctl" \
                    >"$OUT/$server-$job-$run.before.json"
                fio --name=job --ioengine=nbd "--uri=${URI[$server]}" "--rw=$rw" "--bs=$bs" \
                    --iodepth=8 --numjobs=1 --size=48M --time_based "--runtime=$RUNTIME" \
                    --randrepeat=0 --output-format=json \
                    "--output=$OUT/$server-$job-$run.json" >/dev/null
                "$PLATTER" stats --json --control "$WORK/$server/sock.ctl" \
                    >"$OUT/$server-$job-$run.after.json"
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
def stat(server, job, run):
    """Client writes, log records and clearing flushes during the job."""
    def load(when):
        s = json.load(open(f"{out}/{server}-{job}-{run}.{when}.json"))
        s = s.get("stats", s)
        ppl = s.get("ppl") or {}
        return (s["volume"]["writes"], ppl.get("records", 0),
                ppl.get("clearing_flushes", 0))
    a, b = load("before"), load("after")
    return tuple(y - x for x, y in zip(a, b))
print()
print("| level | job | plain (IOPS, median) | with the log | ratio (median) | runs | records / 1k writes | clearing flushes / 1k writes |")
print("|---|---|---|---|---|---|---|---|")
for level in ("raid5", "raid6"):
    for job in ("seq-write", "seq-write-64k", "rand-write", "rand-read"):
        plain = [iops(f"{level}-plain", job, k) for k in range(1, runs + 1)]
        ppl = [iops(f"{level}-ppl", job, k) for k in range(1, runs + 1)]
        ratios = [s / p for s, p in zip(ppl, plain)]
        counts = [stat(f"{level}-ppl", job, k) for k in range(1, runs + 1)]
        writes = sum(c[0] for c in counts) or 1
        print(f"| {level} | {job} | {statistics.median(plain):,.0f} | "
              f"{statistics.median(ppl):,.0f} | {statistics.median(ratios):.2f} | "
              + ", ".join(f"{r:.2f}" for r in ratios)
              + f" | {1000 * sum(c[1] for c in counts) / writes:.0f}"
              + f" | {1000 * sum(c[2] for c in counts) / writes:.0f} |")
EOF
echo "results in $OUT"
