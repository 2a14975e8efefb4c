#!/usr/bin/env bash
# Remote members (issue 16): a mirror over two NBD exports, each with
# latency added by nbdkit's delay filter, against one such export used
# directly by the same client in the same run. See bench/README.md.
#
#   bench/remote.sh [--runs N] [--runtime SECS] [--delay MS] [--tcp]
#                   [--platter BIN] [--out DIR] [--dir DIR]
#                   [--serve-args "ARGS"] [--exports REF A B]
#
# Each member is a file on tmpfs (or --dir) served by its own nbdkit
# (`--filter=delay delay-read=MS delay-write=MS`, 16 threads) on a Unix
# socket, or with --tcp on a TCP port of 127.0.0.1 (nbd:// members, whose
# default is 4 connections each instead of 2). Subjects and references
# (fio nbd engine, --runtime s each):
#   write  mirror x2 over two exports, 1M sequential write, iodepth 8,
#          against 1M sequential writes at iodepth 8 straight to one
#          export: throughput ratio (issue 16 asks >= 0.8)
#   read   the mirror, 4k random read, iodepth 32, against the same
#          straight to one export: IOPS ratio (issue 16 asks >= 1.6:
#          reads spread over both copies)
# The whole set runs --runs times; the table shows the medians of the
# per-run ratios, and how busy the machine's CPUs were during each side
# (near 100%, the cores set the pace, not the members' latency); then CPU
# per unit of work by process and platter's thread switches per unit,
# and where a mirror request's time goes (fio's completion time against
# platter's volume and member latencies, from `platter stats`): both
# with --runtime 3 or more. Not a test: it prints. --serve-args passes
# options to the mirror's `platter serve` (for example
# "--member-connections 1") to compare settings.
#
# --exports REF A B uses three NBD exports that already exist (URIs, each
# with its latency already there: other hosts, or nbdkit's delay filter
# started by hand) instead of starting nbdkit here: REF is the reference,
# A and B become the mirror. Their contents are overwritten (A and B get
# platter's label). Then no CPU is counted for the exports' servers, and
# --delay and --tcp do not apply. This is how to measure on hosts whose
# servers do not share platter's cores: on one 2-core machine the 1 ms
# figures are set by the cores (bench/README.md).

set -euo pipefail
. "$(dirname "$0")/lib.sh"

RUNS=3
RUNTIME=5
DELAY=1
OUT=""
PLATTER=""
MEMBER_DIR=""
SERVE_ARGS=""
TCP=""
EXPORTS=()

bench_option() {
    case "$1" in
        --delay) DELAY="$2" ;;
        --serve-args) SERVE_ARGS="$2" ;;
        --tcp) TCP=1; TAKES=1 ;;
        --exports)
            [ $# -ge 4 ] || { echo "remote.sh: --exports wants three URIs: REF A B" >&2; exit 2; }
            EXPORTS=("$2" "$3" "$4"); TAKES=4 ;;
        *) return 1 ;;
    esac
}

bench_options "$@"
case "$DELAY" in ''|*[!0-9]*) die "--delay wants whole milliseconds" ;; esac
command -v nbdkit >/dev/null || die "needs nbdkit (Debian: apt-get install nbdkit)"
command -v nbdinfo >/dev/null || die "needs nbdinfo (Debian: apt-get install libnbd-bin)"
if [ ${#EXPORTS[@]} -gt 0 ]; then TRANSPORT="the exports given (--exports)"
elif [ -n "$TCP" ]; then TRANSPORT="TCP on 127.0.0.1"; else TRANSPORT="Unix sockets"; fi
bench_setup remote

# export NAME: a 256 MiB member file exported by nbdkit with the delay;
# sets PID[NAME] and URI[NAME].
export_member() {
    local name="$1" port listen
    truncate -s 256M "$WORK/$name.img"
    if [ -n "$TCP" ]; then
        port=$(free_port)
        listen=(-i 127.0.0.1 -p "$port")
        URI[$name]="nbd://127.0.0.1:$port/"
    else
        listen=(-U "$WORK/$name.sock")
        URI[$name]="nbd+unix:///?socket=$WORK/$name.sock"
    fi
    nbdkit -f "${listen[@]}" --threads 16 --filter=delay \
        file "file=$WORK/$name.img" "delay-read=${DELAY}ms" "delay-write=${DELAY}ms" \
        >"$OUT/$name.log" 2>&1 &
    PID[$name]=$!
    for _ in $(seq 100); do
        nbdinfo --size "${URI[$name]}" >/dev/null 2>&1 && return
        kill -0 "${PID[$name]}" 2>/dev/null || break
        sleep 0.1
    done
    die "nbdkit $name did not start: $(tail -n 5 "$OUT/$name.log")"
}

# proc_switches: the time, then one line per server, "NAME SWITCHES" (the
# voluntary and involuntary context switches of its live threads so far):
# each is a thread put to sleep or off its CPU, the cost a wake-up per
# reply adds. Taken inside a job, while the client's connection (and its
# threads) is still there.
proc_switches() {
    local name
    date +%s.%N
    for name in "${!PID[@]}"; do
        echo "$name $(cat /proc/"${PID[$name]}"/task/*/status 2>/dev/null |
            awk '/ctxt_switches/ {n += $2} END {print n + 0}')"
    done
}

# proc_cpu: one line per server, "NAME TICKS" (user + system clock ticks
# of all its threads so far, /proc/PID/stat fields 14 and 15).
proc_cpu() {
    local name
    for name in "${!PID[@]}"; do
        echo "$name $(cut -d')' -f2 "/proc/${PID[$name]}/stat" | awk '{print $12 + $13}')"
    done
}

# free_port: a TCP port of 127.0.0.1 nobody listens on now.
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

if [ ${#EXPORTS[@]} -gt 0 ]; then
    echo "== exports: ${EXPORTS[*]} (given; their latency is theirs)"
    for i in 0 1 2; do
        name=$(echo ref a b | cut -d' ' -f$((i + 1)))
        URI[$name]="${EXPORTS[$i]}"
        nbdinfo --size "${URI[$name]}" >/dev/null 2>&1 ||
            die "export $name (${URI[$name]}) does not answer: nbdinfo --size fails"
    done
else
    echo "== exports: nbdkit file plugin, delay ${DELAY} ms per read and write, over $TRANSPORT"
    export_member ref
    export_member a
    export_member b
fi
"$PLATTER" create --level mirror --name mirror2 --bitmap-region 0 "${URI[a]}" "${URI[b]}" \
    >"$OUT/create-mirror2.txt"
mkdir -p "$WORK/mirror2"
# shellcheck disable=SC2086 # --serve-args is a list of options
NO_COLOR=1 "$PLATTER" serve --socket "$WORK/mirror2/sock" $SERVE_ARGS "${URI[a]}" "${URI[b]}" \
    >"$OUT/mirror2.out" 2>"$OUT/mirror2.log" &
PID[mirror2]=$!
wait_ready mirror2
URI[mirror2]="nbd+unix:///mirror2?socket=$WORK/mirror2/sock"

# name: target rw bs iodepth
declare -A JOB=(
    [ref-write]="ref write 1M 8"
    [mirror-write]="mirror2 write 1M 8"
    [ref-read]="ref randread 4k 32"
    [mirror-read]="mirror2 randread 4k 32"
)
ORDER=(ref-write mirror-write ref-read mirror-read)

{
    bench_machine "nbdkit $(nbdkit --version | cut -d' ' -f2)"
    echo "serve:     ${SERVE_ARGS:-(defaults)}"
    if [ ${#EXPORTS[@]} -gt 0 ]; then
        echo "delay:     the exports' own; $RUNS runs of ${RUNTIME} s per job"
    else
        echo "delay:     ${DELAY} ms per member read and write; $RUNS runs of ${RUNTIME} s per job"
    fi
    echo "members:   $TRANSPORT"
} | tee "$OUT/environment.txt"

for run in $(seq 1 "$RUNS"); do
    for job in "${ORDER[@]}"; do
        read -r target rw bs depth <<<"${JOB[$job]}"
        if [ -n "${PID[$target]:-}" ]; then
            kill -0 "${PID[$target]}" 2>/dev/null || die "$target died"
        fi
        echo "== run $run/$RUNS: $job ($rw $bs iodepth $depth on $target)"
        head -n 1 /proc/stat >"$OUT/$job-$run.cpu"
        proc_cpu >"$OUT/$job-$run.proc"
        fio --name=job --ioengine=nbd "--uri=${URI[$target]}" "--rw=$rw" "--bs=$bs" \
            "--iodepth=$depth" --numjobs=1 --size=192M --time_based "--runtime=$RUNTIME" \
            --randrepeat=0 --output-format=json "--output=$OUT/$job-$run.json" >/dev/null &
        fio_pid=$!
        # Thread switches over the job's middle (from 1 s in to 1 s before
        # its end), with --runtime 3 or more.
        # platter's latency counters over the same span, on the mirror.
        if [ "$RUNTIME" -ge 3 ]; then
            sleep 1
            proc_switches >"$OUT/$job-$run.switches"
            if [ "$target" = mirror2 ]; then
                "$PLATTER" stats --control "$WORK/mirror2/sock.ctl" --reset >/dev/null
            fi
            sleep $((RUNTIME - 2))
            proc_switches >>"$OUT/$job-$run.switches"
            if [ "$target" = mirror2 ]; then
                "$PLATTER" stats --control "$WORK/mirror2/sock.ctl" --json \
                    >"$OUT/$job-$run.stats.json"
            fi
        fi
        wait "$fio_pid" || die "fio failed in $job (see $OUT/$job-$run.json)"
        head -n 1 /proc/stat >>"$OUT/$job-$run.cpu"
        proc_cpu >>"$OUT/$job-$run.proc"
    done
done

python3 - "$OUT" "$RUNS" "$(getconf CLK_TCK)" "$(nproc)" "${#EXPORTS[@]}" <<'PY' | tee "$OUT/summary.txt"
import json, os, statistics, sys
out, runs, hz, cpus = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
# Exports given with --exports: their servers' CPU is not ours to count.
local_servers = sys.argv[5] == "0"

def fio(name, run):
    return json.load(open(f"{out}/{name}-{run}.json"))["jobs"][0]

def job(name, run):
    j = fio(name, run)
    side = j["read"] if j["read"]["io_bytes"] else j["write"]
    return side["bw_bytes"] / 2**20, side["iops"]

def busy(name, run):
    # The share of the machine's CPU time not idle during the job: near
    # 100% the cores, not the members' latency, set the pace.
    a, b = ([int(x) for x in l.split()[1:]] for l in open(f"{out}/{name}-{run}.cpu"))
    d = [y - x for x, y in zip(a, b)]
    return 100.0 * (1 - (d[3] + d[4]) / sum(d))

def counted(name, run, ext):
    # How much each server's counter in {name}-{run}.{ext} grew in the job.
    before, after = {}, {}
    lines = [l for l in open(f"{out}/{name}-{run}.{ext}").read().split("\n") if l]
    for i, l in enumerate(lines):
        k, v = l.split()
        (before if i < len(lines) // 2 else after)[k] = int(v)
    return {k: after[k] - before[k] for k in after}

def cpu_s(name, run):
    # CPU seconds each server used during the job, and fio's own.
    used = {k: v / hz for k, v in counted(name, run, "proc").items()}
    j = fio(name, run)
    used["fio"] = (j["usr_cpu"] + j["sys_cpu"]) / 100 * j["job_runtime"] / 1000
    return used

rows = [
    ("mirror x2, 1M seq write qd8", "mirror-write", "ref-write", 0, "MiB/s", 0.8),
    ("mirror x2, 4k rand read qd32", "mirror-read", "ref-read", 1, "IOPS", 1.6),
]
print()
print("| case | mirror | one export | ratio (median) | issue 16 asks | runs | CPU busy: mirror / one |")
print("|---|---|---|---|---|---|---|")
costs = []
for case, subj, ref, k, unit, want in rows:
    pairs = [(job(subj, r)[k], job(ref, r)[k]) for r in range(1, runs + 1)]
    ratios = [s / r for s, r in pairs]
    s = statistics.median(p[0] for p in pairs)
    r = statistics.median(p[1] for p in pairs)
    busy_s = statistics.median(busy(subj, r) for r in range(1, runs + 1))
    busy_r = statistics.median(busy(ref, r) for r in range(1, runs + 1))
    print(f"| {case} | {s:,.0f} {unit} | {r:,.0f} {unit} | {statistics.median(ratios):.2f} | "
          f">= {want} | " + ", ".join(f"{x:.2f}" for x in ratios) +
          f" | {busy_s:.0f}% / {busy_r:.0f}% |")
    # CPU per unit of work (ms per MiB, us per I/O), by process.
    per = 1e3 if k == 0 else 1e6
    def done(name, run):
        j = fio(name, run)
        side = j["read"] if j["read"]["io_bytes"] else j["write"]
        return side["io_bytes"] / 2**20 if k == 0 else side["total_ios"]
    def cost(name, who):
        return statistics.median(
            sum(v for n, v in cpu_s(name, run).items() if n in who) * per / done(name, run)
            for run in range(1, runs + 1))
    def switches_per_unit(run):
        # The server's switches a second over the job's middle, over the
        # job's units (MiB or I/Os) a second.
        lines = open(f"{out}/{subj}-{run}.switches").read().split()
        half = len(lines) // 2
        t0, t1 = float(lines[0]), float(lines[half])
        before = dict(zip(lines[1:half:2], lines[2:half:2]))
        after = dict(zip(lines[half + 1::2], lines[half + 2::2]))
        rate = (int(after["mirror2"]) - int(before["mirror2"])) / (t1 - t0)
        return rate / (done(subj, run) / (fio(subj, run)["job_runtime"] / 1000))
    switches = (statistics.median(switches_per_unit(run) for run in range(1, runs + 1))
                if os.path.exists(f"{out}/{subj}-1.switches") else float("nan"))
    unit_cost = "ms/MiB" if k == 0 else "us/IO"
    members = cost(subj, {"a", "b"})
    mirror_fio = cost(subj, {"fio"})
    platter = cost(subj, {"mirror2"})
    ref_server = cost(ref, {"ref"})
    ref_fio = cost(ref, {"fio"})
    # What the mirror could reach here if platter cost nothing and the
    # cores were the only limit: the members' servers and fio alone.
    ceiling = cpus * per / (members + mirror_fio) / r
    costs.append((case, unit_cost, platter, switches, members, mirror_fio, ref_server, ref_fio,
                  ceiling))
print()
print("CPU per unit of work, by process (medians): where a ratio is capped by the machine's cores")
print()
print("| case | unit | mirror: platter | platter's thread switches per unit | mirror: both exports' nbdkit | mirror: fio | one export: nbdkit | one export: fio | ratio if platter cost nothing (CPU-bound) |")
print("|---|---|---|---|---|---|---|---|---|")
for case, u, p, sw, m, f, rs, rf, c in costs:
    if local_servers:
        print(f"| {case} | {u} | {p:.3f} | {sw:.1f} | {m:.3f} | {f:.3f} | {rs:.3f} | {rf:.3f} | {c:.2f} |")
    else:
        print(f"| {case} | {u} | {p:.3f} | {sw:.1f} | n/a | {f:.3f} | n/a | {rf:.3f} | n/a |")

def mean_us(h):
    return h["sum"] / h["count"] / 1e3 if h["count"] else float("nan")

def clat_us(name, run):
    j = fio(name, run)
    side = j["read"] if j["read"]["io_bytes"] else j["write"]
    return side["clat_ns"]["mean"] / 1e3

def latencies(subj, run):
    # fio's mean completion time; platter's, from a request's start in
    # the engine to its end; the members', from a member request's send
    # to its reply's handling (platter's reader thread included).
    st = json.load(open(f"{out}/{subj}-{run}.stats.json"))
    vol = st["volume"]["read_latency" if "read" in subj else "write_latency"]
    members = st["members"]
    total = sum(m["latency"]["sum"] for m in members)
    count = sum(m["latency"]["count"] for m in members)
    return clat_us(subj, run), mean_us(vol), total / count / 1e3 if count else float("nan")

if os.path.exists(f"{out}/mirror-read-1.stats.json"):
    print()
    print("Where a mirror request's time goes (medians of means, us, over each job's middle). "
          "members: from a member request's send to platter's reader handling its reply; "
          "engine: the rest of the volume's time (a write's later send, the slower copy); "
          "outside: fio's time before the engine starts it and after it ends (the request "
          "waiting in the socket to be read, its payload's transfer, the reply's way back), "
          "where the queue sits when the cores are the limit")
    print()
    print("| case | fio: mean completion | platter: volume mean | platter: members' mean | "
          "engine (volume - members) | outside (fio - volume) | one export: fio mean completion |")
    print("|---|---|---|---|---|---|---|")
    for case, subj, ref, *_ in rows:
        lat = [latencies(subj, r) for r in range(1, runs + 1)]
        f, v, m = (statistics.median(x[i] for x in lat) for i in range(3))
        engine = statistics.median(x[1] - x[2] for x in lat)
        outside = statistics.median(x[0] - x[1] for x in lat)
        one = statistics.median(clat_us(ref, r) for r in range(1, runs + 1))
        print(f"| {case} | {f:,.0f} | {v:,.0f} | {m:,.0f} | {engine:,.0f} | {outside:,.0f} | {one:,.0f} |")
PY
echo "results in $OUT"
