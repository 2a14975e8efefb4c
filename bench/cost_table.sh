#!/usr/bin/env bash
# Issue 45's table: what each server costs per I/O and per MiB, with the
# server on one CPU and fio on the other. Servers, each over tmpfs files:
#   concat1   platter, a concat of 1 member (64 MiB)
#   stripe4   platter, a stripe of 4 members, 64k interleave
#   mirror2   platter, a mirror of 2 members
#   raid5x4   platter, a raid5 of 4 members, 64k interleave
#   nbdkit    nbdkit's file plugin over one 256 MiB file (the reference)
#   qsd       qemu-storage-daemon's NBD export of one 256 MiB file
# Jobs (fio's nbd engine, time based): 4k random read and write at iodepth
# 32, 1M sequential read and write at iodepth 8. Each (server, job) runs
# --runs times (each a --runtime s job after a 2 s warm-up of the same
# job); the table shows medians: I/Os or MiB a second, and the server's
# user+system CPU (from /proc/PID/stat) per I/O and per MiB, with the
# ratio of each to nbdkit's in the same run.
#
#   bench/cost_table.sh [--runs N] [--runtime SECS] [--latency T]
#                       [--pin SERVER_CPU:CLIENT_CPU] [--counts]
#                       [--platter BIN] [--out DIR] [--dir DIR]
#
# --counts adds a second table: per I/O, the server's system calls,
# context switches (the server's threads handing work to each other, or
# waiting) and page faults, counted by `perf stat -p` over each job
# (software events: they need no hardware counters), medians again.
# --latency 2ms (default none) gives every member that latency (`serve --inject`) and
# nbdkit its delay filter (delay-read, delay-write); qemu-storage-daemon
# has no latency of its own to inject, so it is left out of that table.
# --pin defaults to 1:0 (the server under `taskset -c 1`, fio under
# `taskset -c 0`). Defaults: 5 runs of 5 s. Not a test: it prints, and
# keeps each job's fio JSON and the servers' logs in --out.

set -euo pipefail
. "$(dirname "$0")/lib.sh"

RUNS=5
RUNTIME=5
LATENCY=none
OUT=""
PLATTER=""
MEMBER_DIR=""
PIN=1:0
COUNTS=0
bench_own_option() {
    case "$1" in
        --pin) PIN="${2-}" ;;
        --counts) COUNTS=1 TAKES=1 ;;
        *) return 1 ;;
    esac
}
bench_options "$@"
[[ "$PIN" =~ ^[0-9]+:[0-9]+$ ]] || bench_usage_error "--pin wants SERVER_CPU:CLIENT_CPU (1:0), not $PIN"
SERVER_PIN=(taskset -c "${PIN%%:*}")
CLIENT_PIN=(taskset -c "${PIN##*:}")
command -v nbdkit >/dev/null || die "needs nbdkit (Debian: apt-get install nbdkit)"
command -v taskset >/dev/null || die "needs taskset (Debian: util-linux)"
[ "$COUNTS" = 0 ] || command -v perf >/dev/null || die "--counts needs perf (Debian: apt-get install linux-perf)"
SERVERS=(concat1 stripe4 mirror2 raid5x4 nbdkit)
if [ "$LATENCY" = none ]; then
    command -v qemu-storage-daemon >/dev/null || die "needs qemu-storage-daemon (Debian: apt-get install qemu-system-common)"
    SERVERS+=(qsd)
fi
JOBS=("randread 4k 32" "randwrite 4k 32" "read 1M 8" "write 1M 8")
bench_setup cost-table
TICKS=$(getconf CLK_TCK)
{
    bench_machine
    echo "pin:       server $PIN (server:client), runs $RUNS x ${RUNTIME}s, latency $LATENCY"
} >"$OUT/environment.txt"
cat "$OUT/environment.txt"

# start_server NAME: the server NAME, pinned, over new files in WORK/NAME;
# sets PID[NAME] and URI[NAME].
start_server() {
    local name="$1" d="$WORK/$1" level n paths=() inject=() i
    mkdir -p "$d"
    case "$name" in
        concat1) level=concat n=1 ;;
        stripe4) level=stripe n=4 ;;
        mirror2) level=mirror n=2 ;;
        raid5x4) level=raid5 n=4 ;;
        nbdkit)
            truncate -s 256M "$d/ref.img"
            local delay=()
            [ "$LATENCY" = none ] || delay=(--filter=delay file "$d/ref.img" "delay-read=$LATENCY" "delay-write=$LATENCY")
            [ "$LATENCY" != none ] || delay=(file "$d/ref.img")
            "${SERVER_PIN[@]}" nbdkit --unix "$d/sock" --foreground --exit-with-parent \
                "${delay[@]}" >"$OUT/$name.log" 2>&1 &
            PID[$name]=$!
            URI[$name]="nbd+unix:///?socket=$d/sock"
            await_socket "$name" "$d/sock"
            return ;;
        qsd)
            truncate -s 256M "$d/ref.img"
            "${SERVER_PIN[@]}" qemu-storage-daemon \
                --blockdev "driver=file,node-name=f0,filename=$d/ref.img" \
                --nbd-server "addr.type=unix,addr.path=$d/sock" \
                --export "type=nbd,id=e0,node-name=f0,name=ref,writable=on" >"$OUT/$name.log" 2>&1 &
            PID[$name]=$!
            URI[$name]="nbd+unix:///ref?socket=$d/sock"
            await_socket "$name" "$d/sock"
            return ;;
    esac
    for i in $(seq 0 $((n - 1))); do
        paths+=("$d/m$i")
        [ "$LATENCY" = none ] || inject+=(--inject "$d/m$i=latency=$LATENCY")
    done
    "$PLATTER" create --level "$level" --interleave 64k --member-size 64M --name "$name" \
        "${paths[@]}" >"$OUT/create-$name.txt"
    NO_COLOR=1 "${SERVER_PIN[@]}" "$PLATTER" serve --socket "$d/sock" \
        ${inject[@]+"${inject[@]}"} "${paths[@]}" >"$OUT/$name.out" 2>"$OUT/$name.log" &
    PID[$name]=$!
    await_served "$name" "$d/sock"
}

# await_socket NAME SOCKET: waits (30 s at most) for SOCKET to appear.
await_socket() {
    for _ in $(seq 300); do
        [ -S "$2" ] && return
        kill -0 "${PID[$1]}" 2>/dev/null || die "$1 exited: $(tail -n 5 "$OUT/$1.log")"
        sleep 0.1
    done
    die "$1: no socket in 30 s"
}

stop_server() {
    kill -TERM "${PID[$1]}" 2>/dev/null || true
    wait "${PID[$1]}" 2>/dev/null || true
    unset "PID[$1]"
    rm -rf "${WORK:?}/$1"
}

# measure NAME RUN RW BS DEPTH: one job against server NAME; appends a
# line "server job ios secs cpu_ticks" to OUT/raw.txt.
measure() {
    local name="$1" run="$2" rw="$3" bs="$4" depth="$5" u0 s0 u1 s1
    local job=("${CLIENT_PIN[@]}" fio --name=cost --ioengine=nbd "--uri=${URI[$name]}" "--rw=$rw"
               "--bs=$bs" "--iodepth=$depth" --time_based --output-format=json)
    "${job[@]}" --runtime=2 --output="$OUT/warm.json" >/dev/null
    local counts="$OUT/$name-$rw-$bs-$run.perf" perf=""
    if [ "$COUNTS" = 1 ]; then
        perf stat -x, -o "$counts" -e raw_syscalls:sys_enter,context-switches,page-faults \
            -p "${PID[$name]}" &
        perf=$!
        sleep 0.2
    fi
    read -r u0 s0 < <(awk '{print $14, $15}' "/proc/${PID[$name]}/stat")
    "${job[@]}" "--runtime=$RUNTIME" --output="$OUT/$name-$rw-$bs-$run.json" >/dev/null
    read -r u1 s1 < <(awk '{print $14, $15}' "/proc/${PID[$name]}/stat")
    if [ -n "$perf" ]; then
        kill -INT "$perf"
        wait "$perf" 2>/dev/null || true
    fi
    python3 - "$OUT/$name-$rw-$bs-$run.json" "$name" "$rw $bs qd$depth" \
        "$((u1 - u0 + s1 - s0))" "$counts" >>"$OUT/raw.txt" <<'PY'
import json, os, sys
path, name, job, ticks, counts = sys.argv[1:]
j = json.load(open(path))["jobs"][0]
ios = j["read"]["total_ios"] + j["write"]["total_ios"]
kib = j["read"]["io_kbytes"] + j["write"]["io_kbytes"]
# perf stat -x, lines: value,unit,event,...; a count of the whole job,
# which perf began a moment before fio and ended a moment after.
seen = {}
if os.path.exists(counts):
    for line in open(counts):
        f = line.strip().split(",")
        if len(f) > 2 and f[0].replace(".", "").isdigit():
            seen[f[2]] = float(f[0])
c = [seen.get(e, -1) for e in ("raw_syscalls:sys_enter", "context-switches", "page-faults")]
print(f"{name}\t{job}\t{ios}\t{kib}\t{ticks}\t" + "\t".join(str(int(x)) for x in c))
PY
}

: >"$OUT/raw.txt"
for run in $(seq "$RUNS"); do
    for name in "${SERVERS[@]}"; do
        echo "== run $run of $RUNS: $name"
        start_server "$name"
        for j in "${JOBS[@]}"; do
            read -r rw bs depth <<<"$j"
            measure "$name" "$run" "$rw" "$bs" "$depth"
        done
        stop_server "$name"
    done
done

python3 - "$OUT/raw.txt" "$RUNTIME" "$TICKS" <<'PY' | tee "$OUT/table.txt"
import statistics, sys
path, secs, hz = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
cells, counted = {}, {}
for line in open(path):
    name, job, ios, kib, ticks, *counts = line.rstrip("\n").split("\t")
    cells.setdefault((job, name), []).append((int(ios), int(kib), int(ticks)))
    if counts and min(map(int, counts)) >= 0 and int(ios):
        counted.setdefault((job, name), []).append([int(x) / int(ios) for x in counts])
med = statistics.median
def figures(runs):
    rate = med(ios / secs for ios, _, _ in runs)
    mib_s = med(kib / 1024 / secs for _, kib, _ in runs)
    per_io = med(t / hz * 1e6 / ios for ios, _, t in runs if ios)
    per_mib = med(t / hz * 1e6 / (kib / 1024) for _, kib, t in runs if kib)
    return rate, mib_s, per_io, per_mib
jobs = list(dict.fromkeys(job for job, _ in cells))
names = list(dict.fromkeys(name for _, name in cells))
print(f"{'job':22} {'server':8} {'IO/s':>9} {'MiB/s':>8} {'CPU us/IO':>10} {'CPU us/MiB':>11} "
      f"{'IO/s vs nbdkit':>15} {'us/MiB vs nbdkit':>17}")
for job in jobs:
    ref = figures(cells[(job, "nbdkit")]) if (job, "nbdkit") in cells else None
    for name in names:
        if (job, name) not in cells:
            continue
        rate, mib_s, per_io, per_mib = figures(cells[(job, name)])
        vs = lambda a, b: f"{a / b:.2f}" if b else "-"
        print(f"{job:22} {name:8} {rate:9.0f} {mib_s:8.1f} {per_io:10.1f} {per_mib:11.0f} "
              f"{vs(rate, ref[0]) if ref else '-':>15} {vs(per_mib, ref[3]) if ref else '-':>17}")
if counted:
    print()
    print(f"{'job':22} {'server':8} {'syscalls/IO':>12} {'switches/IO':>12} {'faults/IO':>10}")
    for job in jobs:
        for name in names:
            runs = counted.get((job, name))
            if runs:
                m = [med(r[i] for r in runs) for i in range(3)]
                print(f"{job:22} {name:8} {m[0]:12.2f} {m[1]:12.2f} {m[2]:10.3f}")
PY
echo "raw figures and fio's JSON: $OUT"
