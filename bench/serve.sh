#!/usr/bin/env bash
# Serving benchmark: fio's nbd engine against `platter serve` and against
# nbdkit's file plugin, in the same run, on tmpfs. See bench/README.md.
#
#   bench/serve.sh [--runs N] [--runtime SECS] [--mem-runtime SECS]
#                  [--size SIZE] [--interleave SIZE] [--threads N]
#                  [--only LIST] [--perf JOB] [--platter BIN] [--out DIR]
#
# Servers, each on fresh sparse files in one tmpfs directory:
#   stripe4  platter, stripe over 4 members
#   raid5    platter, raid5 over 4 members
#   mirror2  platter, mirror over 2 members
#   nbdkit   nbdkit's file plugin serving one tmpfs file of stripe4's size
# Comparisons (--only takes a comma-separated subset; default all):
#   stripe   stripe4 against nbdkit: seq read/write 1M qd8, rand read/write 4k qd32
#   raid5    raid5 against stripe4: seq write 1M qd8
#   mirror   mirror2 against nbdkit: rand read 4k qd32
#   memory   16 connections (fio numjobs=16) at iodepth 32 on stripe4 for
#            --mem-runtime seconds (default 60): peak VmRSS against the bound
# Each pair runs back to back, the whole set --runs times; the table shows
# the median of the per-pair ratios. Exits 1 when the memory bound is broken.
# --perf JOB records `perf record -g` on the platter side of JOB (e.g.
# rand-write) in the first run, into the output directory. --platter BIN
# runs that binary instead of building one (to measure an older commit).
# --baseline BIN also serves each compared volume with BIN (an older build)
# and adds a pair per job, this build against that one back to back in the
# same run (comparison "baseline", target >= 1.0): on a shared machine far
# steadier than comparing two runs' ratios to nbdkit.
# --pin SERVER_CPUS:CLIENT_CPUS (e.g. 1:0) runs every server under
# `taskset -c SERVER_CPUS` and fio under `taskset -c CLIENT_CPUS`: on a small
# machine, where client and server otherwise fight over the same CPUs, the
# pair ratios scatter far less (the figure is then the server's cost per
# request on CPUs of its own).

set -euo pipefail
. "$(dirname "$0")/lib.sh"

RUNS=3
RUNTIME=10
MEM_RUNTIME=60
SIZE=1G
INTERLEAVE=64k
THREADS=8
ONLY=stripe,raid5,mirror,memory
PERF_JOB=""
OUT=""
PLATTER=""
BASELINE=""
PIN=""

bench_option() {
    case "$1" in
        --mem-runtime) MEM_RUNTIME="$2" ;;
        --size) SIZE="$2" ;;
        --interleave) INTERLEAVE="$2" ;;
        --threads) THREADS="$2" ;;
        --only) ONLY="$2" ;;
        --perf) PERF_JOB="$2" ;;
        --baseline) BASELINE="$2" ;;
        --pin) PIN="$2" ;;
        *) return 1 ;;
    esac
}

bench_options "$@"
bench_positive "$MEM_RUNTIME" "--mem-runtime wants a positive number of seconds"
want() { case ",$ONLY," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
for c in ${ONLY//,/ }; do
    case "$c" in stripe|raid5|mirror|memory) ;; *) die "unknown comparison in --only: $c" ;; esac
done

for tool in fio nbdkit python3 cargo; do
    command -v "$tool" >/dev/null || die "needs $tool (Debian: apt-get install fio nbdkit python3)"
done
fio --enghelp=nbd >/dev/null 2>&1 || die "this fio has no nbd engine (Debian's fio has it)"
[ -d /dev/shm ] && [ -w /dev/shm ] || die "needs a writable /dev/shm (tmpfs)"
if [ -n "$PERF_JOB" ]; then command -v perf >/dev/null || die "--perf needs perf (Debian: linux-perf)"; fi

# Bytes from a size with a unit (512, 64k, 1M, 1G; s = 512-byte sectors).
bytes() {
    python3 - "$1" <<'EOF'
import re, sys
m = re.fullmatch(r"(\d+)([sSkKmMgGtT]?)", sys.argv[1])
if not m:
    sys.exit("bad size: " + sys.argv[1])
mult = {"": 1, "s": 512, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
print(int(m.group(1)) * mult[m.group(2).lower()])
EOF
}

SIZE_BYTES=$(bytes "$SIZE")
IL_BYTES=$(bytes "$INTERLEAVE")

bench_build serve
[ -z "$BASELINE" ] || [ -x "$BASELINE" ] || die "--baseline: no executable $BASELINE"

ON_SERVER_CPUS=(env) ON_CLIENT_CPUS=(env)
if [ -n "$PIN" ]; then
    [[ "$PIN" == *:* ]] || die "--pin wants SERVER_CPUS:CLIENT_CPUS, e.g. 1:0"
    command -v taskset >/dev/null || die "--pin needs taskset (Debian: util-linux)"
    ON_SERVER_CPUS=(taskset -c "${PIN%%:*}") ON_CLIENT_CPUS=(taskset -c "${PIN#*:}")
fi

WORK=$(mktemp -d -p /dev/shm platter-bench.XXXXXX)
declare -A PID=() URI=()
SAMPLER_PID=""

stop_pid() {
    # $1: pid we started; TERM, wait up to 10 s, then KILL.
    local pid="$1" i
    [ -n "$pid" ] || return 0
    kill -0 "$pid" 2>/dev/null || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 100); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        echo "serve.sh: pid $pid ignored SIGTERM for 10 s; killing it" >&2
        kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
}

cleanup() {
    local rc=$? s
    trap - EXIT INT TERM
    stop_pid "$SAMPLER_PID"
    for s in "${!PID[@]}"; do stop_pid "${PID[$s]}"; done
    rm -rf "$WORK"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- servers -----------------------------------------------------------------
# start_platter NAME LEVEL MEMBERS [BIN]: creates the volume and serves it
# (with BIN, default the build measured) on a Unix socket; sets PID[NAME],
# URI[NAME] and SIZE_OF_NAME.
start_platter() {
    local name="$1" level="$2" members="$3" bin="${4:-$PLATTER}" data i
    case "$level" in
        stripe) data=$members ;;
        mirror) data=1 ;;
        raid5) data=$((members - 1)) ;;
        *) die "unknown level $level" ;;
    esac
    # Each member: a 1 MiB label area, then its share of the data rounded up
    # to a whole interleave. The volume may come out a little larger than
    # --size; nbdkit serves stripe4's exact size (read back from platter).
    local per=$(( (SIZE_BYTES / data + IL_BYTES - 1) / IL_BYTES * IL_BYTES ))
    local mbytes=$(( per + (1 << 20) ))
    local dir="$WORK/$name" paths=()
    mkdir "$dir"
    for i in $(seq 0 $((members - 1))); do paths+=("$dir/m$i"); done
    echo "== $name: $level over $members tmpfs members"
    "$bin" create --level "$level" --interleave "$INTERLEAVE" \
        --member-size "$mbytes" --name "$name" "${paths[@]}" >"$OUT/create-$name.txt"
    local sock="$dir/sock"
    NO_COLOR=1 "${ON_SERVER_CPUS[@]}" "$bin" serve --socket "$sock" --threads "$THREADS" "${paths[@]}" \
        >"$OUT/$name.out" 2>"$OUT/$name.log" &
    PID[$name]=$!
    wait_ready "$name"
    local ready export
    ready=$(grep "^serving '" "$OUT/$name.out" || true)
    [ -n "$ready" ] || die "$name: platter serve did not get ready in 30 s"
    export=$(sed -n "s/^serving '\([^']*\)'.*/\1/p" <<<"$ready")
    printf -v "SIZE_OF_$name" '%s' "$(sed -n "s/^serving '[^']*' ([^,]*, \([0-9]*\) bytes).*/\1/p" <<<"$ready")"
    URI[$name]="nbd+unix:///$export?socket=$sock"
}

start_nbdkit() {
    local bytes="$1" dir="$WORK/nbdkit"
    mkdir "$dir"
    truncate -s "$bytes" "$dir/reference.img"
    "${ON_SERVER_CPUS[@]}" nbdkit --unix "$dir/sock" --foreground --exit-with-parent file "$dir/reference.img" \
        >"$OUT/nbdkit.log" 2>&1 &
    PID[nbdkit]=$!
    for _ in $(seq 300); do
        [ -S "$dir/sock" ] && break
        kill -0 "${PID[nbdkit]}" 2>/dev/null || die "nbdkit exited: $(tail -n 5 "$OUT/nbdkit.log")"
        sleep 0.1
    done
    [ -S "$dir/sock" ] || die "nbdkit did not listen in 30 s"
    URI[nbdkit]="nbd+unix:///?socket=$dir/sock"
}

start_platter stripe4 stripe 4
SIZE_OF_stripe4=${SIZE_OF_stripe4:?cannot read stripe4\'s size}
if want stripe || want mirror; then start_nbdkit "$SIZE_OF_stripe4"; fi
if want raid5; then start_platter raid5 raid5 4; fi
if want mirror; then start_platter mirror2 mirror 2; fi
if [ -n "$BASELINE" ]; then
    start_platter stripe4_base stripe 4 "$BASELINE"
    if want raid5; then start_platter raid5_base raid5 4 "$BASELINE"; fi
    if want mirror; then start_platter mirror2_base mirror 2 "$BASELINE"; fi
fi

# --- fio ---------------------------------------------------------------------
fio_run() {
    # $1 server, $2 output file, $3 rw, $4 bs, $5 iodepth, $6 runtime or ""
    # for one pass over the device. Every job covers the same byte range on
    # both sides of a pair: stripe4's size (the others are at least as large).
    local timing=(--time_based "--runtime=$6")
    [ -n "$6" ] || timing=()
    kill -0 "${PID[$1]}" 2>/dev/null || die "$1 died: $(tail -n 5 "$OUT/$1.log" 2>/dev/null)"
    "${ON_CLIENT_CPUS[@]}" fio --name=job --ioengine=nbd "--uri=${URI[$1]}" "--rw=$3" "--bs=$4" "--iodepth=$5" \
        --numjobs=1 "--size=$SIZE_OF_stripe4" "${timing[@]}" --randrepeat=0 \
        --output-format=json "--output=$2" >/dev/null
}

{
    echo "date:      $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "host:      $(uname -srm), $(nproc) CPUs"
    echo "pinning:   ${PIN:-none} (server CPUs:client CPUs)"
    echo "cpu:       $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)"
    echo "load:      $(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min, at start)"
    echo "fio:       $(fio --version)"
    echo "nbdkit:    $(nbdkit --version)"
    echo "platter:   $("$PLATTER" --version) ($(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo '?'))"
    [ -z "$BASELINE" ] || echo "baseline:  $BASELINE ($("$BASELINE" --version))"
    echo "volumes:   stripe4, raid5 (4), mirror2; interleave $INTERLEAVE, --size $SIZE, --threads $THREADS"
    echo "reference: nbdkit file plugin, one tmpfs file of $SIZE_OF_stripe4 bytes"
    echo "jobs:      ${RUNTIME} s each, time_based, $SIZE_OF_stripe4 bytes, $RUNS runs; compare: $ONLY"
} | tee "$OUT/environment.txt"

# Fill every device once so that reads hit allocated pages, not tmpfs holes.
echo "== filling the devices"
for s in "${!PID[@]}"; do fio_run "$s" "$OUT/fill-$s.json" write 1M 8 ""; done

# name rw bs iodepth: the jobs.
declare -A JOB=(
    [seq-read]="read 1M 8"
    [seq-write]="write 1M 8"
    [rand-read]="randread 4k 32"
    [rand-write]="randwrite 4k 32"
)
# comparison job subject reference: the pairs, in order.
PAIRS=()
if want stripe; then
    PAIRS+=("stripe seq-read stripe4 nbdkit" "stripe seq-write stripe4 nbdkit"
        "stripe rand-read stripe4 nbdkit" "stripe rand-write stripe4 nbdkit")
fi
if want raid5; then PAIRS+=("raid5 seq-write raid5 stripe4"); fi
if want mirror; then PAIRS+=("mirror rand-read mirror2 nbdkit"); fi
if [ -n "$BASELINE" ]; then
    if want stripe; then
        for j in seq-read seq-write rand-read rand-write; do
            PAIRS+=("baseline $j stripe4 stripe4_base")
        done
    fi
    if want raid5; then PAIRS+=("baseline seq-write raid5 raid5_base"); fi
    if want mirror; then PAIRS+=("baseline rand-read mirror2 mirror2_base"); fi
fi

run_job() {
    # $1 server, $2 job, $3 output file, $4 profile this one (1/0)
    local rw bs depth perf_pid=""
    read -r rw bs depth <<<"${JOB[$2]}"
    if [ "$4" = 1 ]; then
        perf record -g -F 999 -p "${PID[$1]}" -o "$OUT/perf-$1-$2.data" \
            >"$OUT/perf-$1-$2.log" 2>&1 &
        perf_pid=$!
        sleep 0.5
    fi
    local ctl="$WORK/$1/sock.ctl"
    # The engine lock's use over the job (platter only): does the lock
    # bound anything? (docs/architecture.md, "The engine lock")
    if [ -S "$ctl" ]; then "$PLATTER" stats --control "$ctl" --json >"$3.lock-before" 2>/dev/null || true; fi
    fio_run "$1" "$3" "$rw" "$bs" "$depth" "$RUNTIME"
    if [ -S "$ctl" ]; then "$PLATTER" stats --control "$ctl" --json >"$3.lock-after" 2>/dev/null || true; fi
    if [ -n "$perf_pid" ]; then
        kill -INT "$perf_pid" 2>/dev/null || true
        wait "$perf_pid" 2>/dev/null || true
        perf report -i "$OUT/perf-$1-$2.data" --no-children --percent-limit 0.5 --stdio \
            >"$OUT/perf-$1-$2.txt" 2>/dev/null || true
        echo "   profile: $OUT/perf-$1-$2.txt"
    fi
}

for run in $(seq 1 "$RUNS"); do
    for pair in "${PAIRS[@]}"; do
        read -r cmp job subject ref <<<"$pair"
        for side in "$subject" "$ref"; do
            prof=0
            if [ "$run" = 1 ] && [ "$job" = "$PERF_JOB" ] && [ "$side" != nbdkit ] \
                && [ ! -e "$OUT/perf-$side-$job.data" ]; then prof=1; fi
            echo "== run $run/$RUNS: $cmp: $job (${JOB[$job]}) on $side"
            run_job "$side" "$job" "$OUT/$cmp-$job-$side-$run.json" "$prof"
        done
    done
done
printf '%s\n' "${PAIRS[@]}" >"$OUT/pairs.txt"

# --- memory ------------------------------------------------------------------
MEM_CONNS=16
MEM_DEPTH=32
if want memory; then
    pid=${PID[stripe4]}
    # The bound (docs/performance.md, "Memory"): the server's fixed part,
    # the idle buffer pool, and per connection its byte budget and an eighth
    # (pooled buffers are rounded up to their size class), its receive
    # buffer and its threads. (16 connections of 64 MiB are exactly the
    # default --buffer-limit of 1 GiB, so that limit does not lower it.) The
    # limits are read from the source the binary was built from.
    read -r CONN_MAX_BYTES READ_BUFFER_BYTES POOL_MAX_BYTES < <(python3 - "$ROOT" <<'EOF'
import re, sys
root = sys.argv[1]
def const(path, name, default=None):
    text = open(f"{root}/{path}").read()
    m = re.search(rf"const {name}: (?:u64|usize) = ([^;]+);", text)
    if not m and default is not None:
        return default
    return eval(m.group(1).replace("_", ""))
print(const("crates/server/src/network/conn.rs", "CONN_MAX_BYTES"),
      const("crates/server/src/network/conn.rs", "READ_BUFFER_BYTES", 0),
      const("crates/io/src/buffers.rs", "POOL_MAX_BYTES"))
EOF
)
    BASE_BYTES=$((32 << 20))
    PER_THREAD_BYTES=$((256 << 10))
    BOUND_BYTES=$(( BASE_BYTES + POOL_MAX_BYTES
        + MEM_CONNS * (CONN_MAX_BYTES * 9 / 8 + READ_BUFFER_BYTES + (THREADS + 1) * PER_THREAD_BYTES) ))
    echo "== memory: $MEM_CONNS connections, iodepth $MEM_DEPTH, ${MEM_RUNTIME} s on stripe4 (bound $((BOUND_BYTES >> 20)) MiB)"
    grep -E '^(VmRSS|VmHWM)' "/proc/$pid/status" | tr -s ' \t' ' ' >"$OUT/memory-before.txt"
    python3 - "$pid" "$OUT/memory-samples.txt" <<'EOF' &
import sys, time
pid, out = sys.argv[1], sys.argv[2]
with open(out, "w") as f:
    t0 = time.monotonic()
    while True:
        try:
            status = open(f"/proc/{pid}/status").read()
        except OSError:
            break
        kb = {l.split(":")[0]: int(l.split()[1]) for l in status.splitlines()
              if l.startswith(("VmRSS", "VmHWM", "Threads"))}
        f.write(f"{time.monotonic() - t0:.2f} {kb['VmRSS']} {kb['VmHWM']} {kb['Threads']}\n")
        f.flush()
        time.sleep(0.2)
EOF
    SAMPLER_PID=$!
    # Mixed sizes up to 1 MiB, reads and writes: the most bytes in flight
    # per request, and the allocator sees every size class.
    kill -0 "$pid" 2>/dev/null || die "stripe4 died"
    "${ON_CLIENT_CPUS[@]}" fio --name=mem --ioengine=nbd "--uri=${URI[stripe4]}" --rw=randrw \
        --bssplit=4k/40:64k/30:1M/30 "--iodepth=$MEM_DEPTH" "--numjobs=$MEM_CONNS" \
        "--size=$SIZE_OF_stripe4" --time_based "--runtime=$MEM_RUNTIME" --randrepeat=0 \
        --group_reporting --output-format=json "--output=$OUT/memory-fio.json" >/dev/null
    grep -E '^(VmRSS|VmHWM)' "/proc/$pid/status" | tr -s ' \t' ' ' >"$OUT/memory-after.txt"
    stop_pid "$SAMPLER_PID"
    SAMPLER_PID=""
    echo "$MEM_CONNS $MEM_DEPTH $MEM_RUNTIME $BOUND_BYTES $BASE_BYTES $POOL_MAX_BYTES $CONN_MAX_BYTES $READ_BUFFER_BYTES $THREADS $PER_THREAD_BYTES" \
        >"$OUT/memory-bound.txt"
fi

# Every platter server must stop cleanly on SIGTERM.
for s in "${!PID[@]}"; do
    [ "$s" = nbdkit ] && continue
    kill -TERM "${PID[$s]}"
    rc=0
    wait "${PID[$s]}" || rc=$?
    unset "PID[$s]"
    [ "$rc" -eq 0 ] || echo "serve.sh: warning: $s exited $rc after SIGTERM" >&2
done

python3 - "$OUT" "$RUNS" <<'EOF' | tee "$OUT/summary.txt"
import json, os, statistics, sys
out, runs = sys.argv[1], int(sys.argv[2])
jobs = {"seq-read": ("read", "1M", 8), "seq-write": ("write", "1M", 8),
        "rand-read": ("read", "4k", 32), "rand-write": ("write", "4k", 32)}
# The issue's targets: the subject's share of the reference's IOPS.
targets = {"stripe": 1.0, "raid5": 0.8, "mirror": 1.0, "baseline": 1.0}
pairs = [l.split() for l in open(f"{out}/pairs.txt") if l.strip()]

def load(path):
    text = open(path).read()
    # fio may print notes before the JSON document.
    return json.loads(text[text.index("{"):])

def result(cmp, name, side, run, direction):
    j = load(f"{out}/{cmp}-{name}-{side}-{run}.json")["jobs"][0]
    if j.get("error"):
        sys.exit(f"{cmp} {name} on {side}, run {run}: fio error {j['error']}")
    d = j[direction]
    return d["iops"], d["bw_bytes"] / (1 << 20)

print()
print(f"{runs} run(s); IOPS are medians; ratio = median of the per-pair subject/reference ratios")
print()
hdr = (f"{'comparison':<26}{'job':<20}{'subject':>9}{'MiB/s':>9}{'reference':>10}{'MiB/s':>9}"
       f"{'ratio':>7}{'target':>8}  pair ratios")
print(hdr)
print("-" * len(hdr))
for cmp, name, subject, ref in pairs:
    direction, bs, depth = jobs[name]
    p = [result(cmp, name, subject, r, direction) for r in range(1, runs + 1)]
    n = [result(cmp, name, ref, r, direction) for r in range(1, runs + 1)]
    # The figure quoted is the median of the per-pair ratios (bench/README.md),
    # each pair measured back to back, which cancels slow drifts in load.
    ratios = [a[0] / b[0] if b[0] else float("nan") for a, b in zip(p, n)]
    ratio = statistics.median(ratios)
    t = targets[cmp]
    verdict = "met" if ratio >= t else "below"
    print(f"{subject + '/' + ref:<26}{name + ' ' + bs + ' qd' + str(depth):<20}"
          f"{statistics.median(x[0] for x in p):>9.0f}{statistics.median(x[1] for x in p):>9.1f}"
          f"{statistics.median(x[0] for x in n):>10.0f}{statistics.median(x[1] for x in n):>9.1f}"
          f"{ratio:>7.2f}{'>=' + format(t, '.1f'):>6} {verdict:<5} "
          + " ".join(f"{r:.2f}" for r in ratios))
print("(subject and reference IOPS columns; MiB/s beside each)")

# The engine lock over each platter job: the share of acquisitions that
# found it held, and how long takers waited per request served, medians
# over the runs (docs/architecture.md, "The engine lock").
locks = {}
for cmp, name, subject, ref in pairs:
    for side in (subject, ref):
        for r in range(1, runs + 1):
            base = f"{out}/{cmp}-{name}-{side}-{r}.json"
            try:
                a, b = (load(base + ".lock-before"), load(base + ".lock-after"))
            except (OSError, ValueError):
                continue
            la, lb = a.get("engine_lock"), b.get("engine_lock")
            if not la or not lb:
                continue
            reqs = sum(b["volume"][k] - a["volume"][k] for k in ("reads", "writes"))
            got = lb["acquired"] - la["acquired"]
            if got <= 0 or reqs <= 0:
                continue
            locks.setdefault((side, name), []).append((
                (lb["contended"] - la["contended"]) / got,
                (lb["waited_ns"] - la["waited_ns"]) / reqs / 1000,
                got / reqs))
if locks:
    print()
    print(f"{'engine lock':<26}{'job':<20}{'contended':>10}{'wait/req':>10}{'takes/req':>10}")
    for (side, name), v in sorted(locks.items()):
        print(f"{side:<26}{name:<20}{statistics.median(x[0] for x in v):>10.1%}"
              f"{statistics.median(x[1] for x in v):>8.2f}us{statistics.median(x[2] for x in v):>10.1f}")

rc = 0
if os.path.exists(f"{out}/memory-bound.txt"):
    conns, depth, secs, bound, base, pool, cmax, rbuf, threads, per_thread = map(
        int, open(f"{out}/memory-bound.txt").read().split())
    samples = [l.split() for l in open(f"{out}/memory-samples.txt") if l.strip()]
    peak_rss = max(int(s[1]) for s in samples) << 10
    hwm = max(int(s[2]) for s in samples) << 10
    threads_seen = max(int(s[3]) for s in samples)
    m = load(f"{out}/memory-fio.json")["jobs"][0]
    iops = m["read"]["iops"] + m["write"]["iops"]
    mib = (m["read"]["bw_bytes"] + m["write"]["bw_bytes"]) / (1 << 20)
    MiB = 1 << 20
    print()
    print(f"memory: {conns} connections x iodepth {depth}, {secs} s, randrw 4k/64k/1M on stripe4:"
          f" {iops:.0f} IOPS, {mib:.0f} MiB/s, {len(samples)} samples, up to {threads_seen} threads")
    print(f"  peak VmRSS {peak_rss / MiB:.1f} MiB, VmHWM (whole life) {hwm / MiB:.1f} MiB;"
          f" bound {bound / MiB:.0f} MiB = {base // MiB} + pool {pool // MiB}"
          f" + {conns} x (9/8 x {cmax // MiB} + {rbuf / MiB:g} + {threads + 1} x {per_thread / MiB:g}) MiB")
    if max(peak_rss, hwm) > bound:
        print("  BOUND EXCEEDED")
        rc = 1
    else:
        print(f"  within the bound ({max(peak_rss, hwm) / bound:.0%} of it)")
print()
print(f"raw fio JSON, logs and this table: {out}")
sys.exit(rc)
EOF
