#!/usr/bin/env bash
# The served volume against the simulator: the same workloads on the same
# geometries, once through `platter serve` (fio's nbd engine, member files
# in --dir, every member given `--inject mN=latency=T`) and once through
# `platter sweep --drive simple` (members of constant latency T, at most
# --queue-depth I/Os at once each, in parallel). See bench/README.md and
# docs/performance.md ("Served against simulated").
#
#   bench/sim_vs_served.sh [--runs N] [--runtime SECS] [--latency T]
#                          [--jitter T|exp:T] [--queue-depth N]
#                          [--platter BIN] [--out DIR] [--dir DIR]
#
# Cases (served: fio, --runtime s each; simulated: the sweep's report):
#   stripe x4 256k  1M sequential read, iodepth 1     mean latency
#   stripe x4 256k  1M sequential read, iodepth 8     throughput (MiB/s)
#   stripe x4 256k  4k random read, iodepth 32        IOPS
#   mirror x2       4k random read, iodepth 32        IOPS
#   raid5 x4 64k    1M sequential write, iodepth 1    mean latency
#   mirror x2       1M sequential write, iodepth 1    mean latency
# The mirror and raid5 have no write-intent bitmap (--bitmap-region 0);
# raid5 keeps serve's stripe cache (64 stripes), and so does the model.
# Two predictions per case: "members alone" is the member model on its
# own (every member I/O takes T); "model" adds what a served request
# costs besides its members, measured in the same run on two one-member
# volumes, not on the volumes compared: the client's link (a request's
# round trip, and its bytes per MiB each way: 4k and 1M jobs at iodepth 1
# on `bare`, a member with no injected latency, less that member's own
# service time per MiB from `platter stats`, which is the member's work,
# not the link's) and a member I/O's cost beyond T (4k and 1M jobs at
# iodepth 1 on `single`, a member with T: the timer's overshoot and the
# hand-offs, and per MiB the member's copy). The link carries one
# request at a time each way; members work in parallel. Each calibration
# figure is the median over the
# runs, and each case is simulated once with them. The ratio is
# served/simulated for latencies and throughputs alike (1.00: agreement;
# above 1 the served latency is longer, or its throughput higher, than
# predicted); the table shows the median over --runs and every run's
# ratio. Not a test: it prints.
# --platter BIN runs that binary instead of building one.
# --dir DIR puts the member files in DIR (default: the cargo target
# directory, a disk file system's page cache, not tmpfs). On tmpfs
# io_uring hands every read to its kernel workers (iou-wrk threads, Linux
# 6.18), a CPU cost and a hand-off that neither a cached ext4 file (copied
# at submission) nor a real member has and the model leaves out: 1 MiB
# reads at iodepth 8, bound by the two CPUs here, come out at 0.74 there.

set -euo pipefail
. "$(dirname "$0")/lib.sh"

RUNS=3
RUNTIME=5
LATENCY=2ms
JITTER=""
QUEUE_DEPTH=32
OUT=""
PLATTER=""
MEMBER_DIR=""

bench_option() {
    case "$1" in
        --jitter) JITTER="$2" ;;
        --queue-depth) QUEUE_DEPTH="$2" ;;
        *) return 1 ;;
    esac
}

bench_options "$@"
bench_positive "$QUEUE_DEPTH" "--queue-depth wants a positive integer"
case "$JITTER" in ''|*[0-9]us|*[0-9]ms|*[0-9]s) ;; *) die "--jitter wants T or exp:T (T with a unit: 500us)" ;; esac
[ -n "$MEMBER_DIR" ] || MEMBER_DIR="${CARGO_TARGET_DIR:-$(cd "$(dirname "$0")/.." && pwd)/target}"
mkdir -p "$MEMBER_DIR"
bench_setup sim-vs-served

INJECT="latency=$LATENCY${JITTER:+,latency-jitter=$JITTER}"

SERVE_ARGS=(--member-queue-depth "$QUEUE_DEPTH")

# Ticks (1/100 s) of the whole machine (busy, idle) and of a server (user + system).
machine_ticks() { awk '/^cpu /{print $2 + $3 + $4 + $7 + $8 + $9, $5 + $6}' /proc/stat; }
server_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

echo "== volumes: every member given $INJECT (one calibration volume none)"
serve bare concat 1 64k none
serve single concat 1 64k "$INJECT"
serve stripe4 stripe 4 256k "$INJECT"
serve mirror2 mirror 2 64k "$INJECT" --bitmap-region 0
serve raid5 raid5 4 64k "$INJECT" --bitmap-region 0

# name: server rw bs iodepth
declare -A JOB=(
    [cal-bare-4k-read]="bare read 4k 1"
    [cal-bare-1m-read]="bare read 1M 1"
    [cal-bare-1m-write]="bare write 1M 1"
    [cal-single-4k-read]="single read 4k 1"
    [stripe-read-qd1]="stripe4 read 1M 1"
    [stripe-read-qd8]="stripe4 read 1M 8"
    [stripe-randread]="stripe4 randread 4k 32"
    [mirror-randread]="mirror2 randread 4k 32"
    [raid5-write]="raid5 write 1M 1"
    [mirror-write]="mirror2 write 1M 1"
    [cal-single-1m-read]="single read 1M 1"
    [cal-single-1m-write]="single write 1M 1"
)
ORDER=(cal-bare-4k-read cal-bare-1m-read cal-bare-1m-write cal-single-4k-read
    cal-single-1m-read cal-single-1m-write
    stripe-read-qd1 stripe-read-qd8 stripe-randread mirror-randread raid5-write mirror-write)

{
    bench_machine
    echo "commit:    $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo "members:   $INJECT, --member-queue-depth $QUEUE_DEPTH; $RUNS runs of ${RUNTIME} s per job"
} | tee "$OUT/environment.txt"

# Every volume's first 48 MiB written once, so that reads copy data: a
# read of a hole in a tmpfs file copies the zero page, about a third
# cheaper per MiB on the build machine, and only some jobs would.
for server in bare single stripe4 mirror2 raid5; do
    echo "== filling $server"
    fio --name=fill --ioengine=nbd "--uri=${URI[$server]}" --rw=write --bs=1M --iodepth=8 \
        --size=48M --output-format=json "--output=$OUT/fill-$server.json" >/dev/null
done

for run in $(seq 1 "$RUNS"); do
    cut -d' ' -f1 /proc/loadavg >"$OUT/load-$run.txt"
    for job in "${ORDER[@]}"; do
        read -r server rw bs depth <<<"${JOB[$job]}"
        kill -0 "${PID[$server]}" 2>/dev/null || die "$server died: $(tail -n 5 "$OUT/$server.log")"
        echo "== run $run/$RUNS: $job ($rw $bs iodepth $depth on $server)"
        # CPU over the job: the machine's busy and idle ticks, the server's.
        cpu_before="$(machine_ticks) $(server_ticks "${PID[$server]}")"
        # The one-member volumes' member service times, for the calibration.
        case "$job" in cal-*) "$PLATTER" stats --control "$WORK/$server/sock.ctl" --reset >/dev/null ;; esac
        # 48 MiB: within every volume (the one-member volumes hold 63 MiB).
        fio --name=job --ioengine=nbd "--uri=${URI[$server]}" "--rw=$rw" "--bs=$bs" \
            "--iodepth=$depth" --numjobs=1 --size=48M --time_based "--runtime=$RUNTIME" \
            --randrepeat=0 --output-format=json "--output=$OUT/$job-$run.json" >/dev/null
        echo "$cpu_before $(machine_ticks) $(server_ticks "${PID[$server]}")" >"$OUT/$job-$run.cpu"
        case "$job" in
            cal-*) "$PLATTER" stats --control "$WORK/$server/sock.ctl" --json >"$OUT/$job-$run.stats.json" ;;
        esac
    done
done

echo "== simulating"
python3 - "$OUT" "$RUNS" "$PLATTER" "$LATENCY" "$JITTER" "$QUEUE_DEPTH" <<'EOF' | tee "$OUT/summary.txt"
import json, statistics, subprocess, sys
out, runs, platter, latency, jitter, depth = sys.argv[1:7]
runs = int(runs)

def ns(t):
    for unit, scale in (("us", 1e3), ("ms", 1e6), ("s", 1e9)):
        if t.endswith(unit):
            return float(t[: -len(unit)]) * scale
    raise SystemExit(f"bad time {t}")

L = ns(latency)
jitter_mean = 0.0
if jitter:
    jitter_mean = ns(jitter[4:]) if jitter.startswith("exp:") else ns(jitter) / 2

def fio(name, run):
    j = json.load(open(f"{out}/{name}-{run}.json"))["jobs"][0]
    side = j["read"] if j["read"]["io_bytes"] else j["write"]
    return {"lat_ns": side["lat_ns"]["mean"], "iops": side["iops"],
            "mib_s": side["bw_bytes"] / 2**20}

# case, job, level, members, interleave, workload, metric
CASES = [
    ("stripe x4 256k, 1M seq read qd1", "stripe-read-qd1", "stripe", 4, "256k",
     "dd:bs=1M,qd=1,total=240M", "lat"),
    ("stripe x4 256k, 1M seq read qd8", "stripe-read-qd8", "stripe", 4, "256k",
     "dd:bs=1M,qd=8,total=240M", "mib_s"),
    ("stripe x4 256k, 4k rand read qd32", "stripe-randread", "stripe", 4, "256k",
     "raidtest:p=32,n=32000,read=100,min=4k,max=4k,align=4k", "iops"),
    ("mirror x2, 4k rand read qd32", "mirror-randread", "mirror", 2, "64k",
     "raidtest:p=32,n=32000,read=100,min=4k,max=4k,align=4k", "iops"),
    ("raid5 x4 64k, 1M seq write qd1", "raid5-write", "raid5", 4, "64k",
     "dd:rw=write,bs=1M,qd=1,total=180M", "lat"),
    ("mirror x2, 1M seq write qd1", "mirror-write", "mirror", 2, "64k",
     "dd:rw=write,bs=1M,qd=1,total=60M", "lat"),
]

def sim(case, member_ns, link, member_per_mib_ns=0):
    _, _, level, n, il, workload, _ = case
    cmd = [platter, "sweep", "--drive", "simple", "--member-size", "63M",
           "--latency", f"{round(member_ns)}ns", "--queue-depth", depth,
           "--levels", level, "--members", str(n), "--interleaves", il,
           "--workload", workload, "--stripe-cache", "64", "--threads", "1", "--json"]
    if jitter:
        cmd += ["--latency-jitter", jitter]
    if link:
        cmd += ["--link", link, "--latency-per-mib", f"{round(member_per_mib_ns)}ns"]
    r = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    return {"lat_ns": r["mean_latency_ms"] * 1e6, "iops": r["iops"],
            "mib_s": r["mb_per_s"] * 1e6 / 2**20}, cmd

def member_ns(name, run):
    """The mean service time of the one member's I/Os over a job (ns)."""
    h = json.load(open(f"{out}/{name}-{run}.stats.json"))["members"][0]["latency"]
    return h["sum"] / max(h["count"], 1)

def cpu(name, run):
    """The server's CPU per request (us) and the machine's idle share."""
    b0, i0, s0, b1, i1, s1 = map(int, open(f"{out}/{name}-{run}.cpu").read().split())
    j = json.load(open(f"{out}/{name}-{run}.json"))["jobs"][0]
    ios = j["read"]["total_ios"] + j["write"]["total_ios"]
    return (s1 - s0) * 1e4 / max(ios, 1), (i1 - i0) / max(b1 - b0 + i1 - i0, 1)

def value(m, metric):
    return m["lat_ns"] / 1e6 if metric == "lat" else m[metric]

med = statistics.median
cal = []
for run in range(1, runs + 1):
    t = lambda job: fio(job, run)["lat_ns"]
    request = t("cal-bare-4k-read")
    # A 1M job less a 4k one: 1020 KiB more.
    per_mib = lambda x: max(x, 0) * 1024 / 1020
    # The bare member's own service time per MiB (its copy to or from
    # tmpfs, from the server's statistics): a member's work, done by every
    # member in parallel, not the link's, which carries one reply at a time.
    member = lambda job: member_ns(job, run) - member_ns("cal-bare-4k-read", run)
    copy_read, copy_write = per_mib(member("cal-bare-1m-read")), per_mib(member("cal-bare-1m-write"))
    read = max(per_mib(t("cal-bare-1m-read") - request) - copy_read, 0)
    write = max(per_mib(t("cal-bare-1m-write") - request) - copy_write, 0)
    # single = bare + T + jitter + the member's cost beyond T.
    overhead = max(t("cal-single-4k-read") - L - jitter_mean - request, 0)
    beyond_1m = [t("cal-single-1m-" + rw) - L - jitter_mean - t("cal-bare-1m-" + rw) for rw in ("read", "write")]
    member_per_mib = per_mib(sum(beyond_1m) / 2 - overhead) + (copy_read + copy_write) / 2
    cal.append((request, read, write, overhead, member_per_mib))
request, read, write, overhead, member_per_mib = [med(c[i] for c in cal) for i in range(5)]
link = f"request={round(request)}ns,read={round(read)}ns,write={round(write)}ns"

rows = {c[0]: [] for c in CASES}
commands = {}
for case in CASES:
    alone, _ = sim(case, L, None)
    model, commands[case[0]] = sim(case, L + overhead, link, member_per_mib)
    for run in range(1, runs + 1):
        rows[case[0]].append((value(fio(case[1], run), case[6]),
                              value(alone, case[6]), value(model, case[6])))

print()
print("Calibration (medians of %d runs): request %.1f us; link read %.1f us/MiB, "
      "write %.1f us/MiB; member I/O %s + %.1f us + %.1f us/MiB"
      % (runs, request / 1e3, read / 1e3, write / 1e3, latency, overhead / 1e3,
         member_per_mib / 1e3))
print("  per run (us, in that order): " + "; ".join(
    "/".join(f"{x / 1e3:.0f}" for x in c) for c in cal))
print("Load average at each run's start: " + ", ".join(
    open(f"{out}/load-{k}.txt").read().strip() for k in range(1, runs + 1)))
print()
print("| case | measure | served | members alone | ratio | model | ratio (median) | runs "
      "| server CPU/req | idle |")
print("|---|---|---|---|---|---|---|---|---|---|")
for case in CASES:
    r = rows[case[0]]
    unit = {"lat": "ms", "iops": "IOPS", "mib_s": "MiB/s"}[case[6]]
    fmt = (lambda x: f"{x:.2f}") if case[6] == "lat" else (lambda x: f"{x:,.0f}")
    ratios = [s / m for s, _, m in r]
    ratios_alone = [s / a for s, a, _ in r]
    what = "latency" if case[6] == "lat" else "throughput"
    print(f"| {case[0]} | {what} ({unit}) | {fmt(med(s for s, _, _ in r))} "
          f"| {fmt(med(a for _, a, _ in r))} | {med(ratios_alone):.2f} "
          f"| {fmt(med(m for _, _, m in r))} | {med(ratios):.2f} | "
          + ", ".join(f"{x:.2f}" for x in ratios)
          + f" | {med(cpu(case[1], k)[0] for k in range(1, runs + 1)):.0f} us"
          + f" | {100 * med(cpu(case[1], k)[1] for k in range(1, runs + 1)):.0f}% |")
print()
print("The simulation of each case:")
for case in CASES:
    print("  " + " ".join(commands[case[0]]))
EOF
echo "results in $OUT"
