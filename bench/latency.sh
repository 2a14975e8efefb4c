#!/usr/bin/env bash
# Latency-bound benchmark: whether platter keeps several slow members busy
# at once. Every member of every volume is given the same injected latency
# (`serve --inject mN=latency=2ms`); each figure is compared with one
# member I/O as a one-member volume serves it in the same run. See
# bench/README.md and docs/performance.md ("Members with latency").
#
#   bench/latency.sh [--runs N] [--runtime SECS] [--latency T]
#                    [--platter BIN] [--out DIR] [--dir DIR]
#
# Volumes, on sparse tmpfs files, each member's latency injected:
#   single   concat over 1 member: the reference
#   stripe4  stripe over 4 members, 256k interleave
#   mirror2  mirror over 2 members
#   raid5    raid5 over 4 members, 64k interleave (192k stripes)
# The mirror and raid5 have no write-intent bitmap (--bitmap-region 0):
# its updates would add member I/Os of their own to some requests.
# Cases (fio nbd engine, mean latency per request; runs of --runtime s):
#   stripe-read   stripe4 1M sequential read, iodepth 1, against single's
#                 1M read at iodepth 1 (ideal 1.0: one member I/O's time)
#   stripe-iops   stripe4 4k random read, iodepth 32: IOPS against
#                 32 / single's 4k random read latency at iodepth 1
#                 (ideal 1.0: 32 member I/Os always in flight)
#   mirror-write  mirror2 1M sequential write, iodepth 1, against single's
#                 1M write (ideal 1.0)
#   raid5-write   raid5 192k sequential (full-stripe) write, iodepth 1,
#                 against single's 192k write (ideal 1.0)
# The whole set runs --runs times; each run's ratios use that run's
# reference, and the table shows their medians. Not a test: it prints.
# --platter BIN runs that binary instead of building one (an older commit).
# --dir DIR puts the member files in DIR (default /dev/shm, tmpfs). On
# tmpfs io_uring hands every read to its kernel workers (iou-wrk threads,
# Linux 6.18); on ext4's page cache a cached read is copied at submission.

set -euo pipefail
. "$(dirname "$0")/lib.sh"

RUNS=3
RUNTIME=5
LATENCY=2ms
OUT=""
PLATTER=""
MEMBER_DIR=""

bench_options "$@"
bench_setup latency
SERVE_ARGS=()

echo "== volumes: every member given latency=$LATENCY"
serve single concat 1 64k "latency=$LATENCY"
serve stripe4 stripe 4 256k "latency=$LATENCY"
serve mirror2 mirror 2 64k "latency=$LATENCY" --bitmap-region 0
serve raid5 raid5 4 64k "latency=$LATENCY" --bitmap-region 0

# name: server rw bs iodepth
declare -A JOB=(
    [ref-1m-read]="single read 1M 1"
    [ref-4k-randread]="single randread 4k 1"
    [ref-1m-write]="single write 1M 1"
    [ref-192k-write]="single write 192k 1"
    [stripe-read]="stripe4 read 1M 1"
    [stripe-iops]="stripe4 randread 4k 32"
    [mirror-write]="mirror2 write 1M 1"
    [raid5-write]="raid5 write 192k 1"
)
ORDER=(ref-1m-read stripe-read ref-4k-randread stripe-iops ref-1m-write mirror-write
    ref-192k-write raid5-write)

{
    bench_machine
    echo "latency:   $LATENCY per member I/O; $RUNS runs of ${RUNTIME} s per job"
} | tee "$OUT/environment.txt"

for run in $(seq 1 "$RUNS"); do
    for job in "${ORDER[@]}"; do
        read -r server rw bs depth <<<"${JOB[$job]}"
        kill -0 "${PID[$server]}" 2>/dev/null || die "$server died: $(tail -n 5 "$OUT/$server.log")"
        echo "== run $run/$RUNS: $job ($rw $bs iodepth $depth on $server)"
        # 48 MiB: within every volume (the single member holds 63 MiB).
        fio --name=job --ioengine=nbd "--uri=${URI[$server]}" "--rw=$rw" "--bs=$bs" \
            "--iodepth=$depth" --numjobs=1 --size=48M --time_based "--runtime=$RUNTIME" \
            --randrepeat=0 --output-format=json "--output=$OUT/$job-$run.json" >/dev/null
    done
done

python3 - "$OUT" "$RUNS" <<'EOF' | tee "$OUT/summary.txt"
import json, statistics, sys
out, runs = sys.argv[1], int(sys.argv[2])

def job(name, run):
    j = json.load(open(f"{out}/{name}-{run}.json"))["jobs"][0]
    side = j["read"] if j["read"]["io_bytes"] else j["write"]
    return side["lat_ns"]["mean"] / 1e6, side["iops"]

rows = [
    # case, subject, reference, what, ratio from (subject, reference)
    ("stripe x4 256k, 1M seq read qd1", "stripe-read", "ref-1m-read",
     "latency / one member I/O", lambda s, r: s[0] / r[0]),
    ("stripe x4 256k, 4k rand read qd32", "stripe-iops", "ref-4k-randread",
     "IOPS / (32 / member latency)", lambda s, r: s[1] / (32 / (r[0] / 1e3))),
    ("mirror x2, 1M seq write qd1", "mirror-write", "ref-1m-write",
     "latency / one member I/O", lambda s, r: s[0] / r[0]),
    ("raid5 x4 64k, 192k full-stripe write qd1", "raid5-write", "ref-192k-write",
     "latency / one member I/O", lambda s, r: s[0] / r[0]),
]
print()
print("| case | subject | one member I/O | ratio (median) | runs |")
print("|---|---|---|---|---|")
for case, subj, ref, what, ratio in rows:
    pairs = [(job(subj, k), job(ref, k)) for k in range(1, runs + 1)]
    ratios = [ratio(s, r) for s, r in pairs]
    s_ms = statistics.median(s[0] for s, _ in pairs)
    s_iops = statistics.median(s[1] for s, _ in pairs)
    r_ms = statistics.median(r[0] for _, r in pairs)
    subject = f"{s_iops:,.0f} IOPS" if "IOPS" in what else f"{s_ms:.2f} ms"
    print(f"| {case} | {subject} | {r_ms:.2f} ms | {statistics.median(ratios):.2f} ({what}) | "
          + ", ".join(f"{x:.2f}" for x in ratios) + " |")
EOF
echo "results in $OUT"
