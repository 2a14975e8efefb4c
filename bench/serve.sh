#!/usr/bin/env bash
# Serving benchmark: fio's nbd engine against `platter serve` and against
# nbdkit's file plugin, in the same run, on tmpfs. See bench/README.md.
#
#   bench/serve.sh [--runs N] [--runtime SECS] [--size SIZE] [--level LEVEL]
#                  [--members N] [--interleave SIZE] [--threads N] [--out DIR]
#
# platter: a LEVEL volume (default stripe) over N members (default 4), each a
# sparse file in a fresh tmpfs directory (mktemp -d -p /dev/shm).
# nbdkit: the file plugin serving one tmpfs file of the volume's exact size.
# Both listen on Unix sockets. Four fio jobs, each run against platter then
# nbdkit, the whole set repeated --runs times; the table shows each side's
# median and the platter/nbdkit ratios.

set -euo pipefail

RUNS=3
RUNTIME=10
SIZE=1G
LEVEL=stripe
MEMBERS=4
INTERLEAVE=64k
THREADS=8
OUT=""

usage() {
    sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
    exit "${1:-0}"
}

while [ $# -gt 0 ]; do
    case "$1" in
        --runs) RUNS="$2"; shift 2 ;;
        --runtime) RUNTIME="$2"; shift 2 ;;
        --size) SIZE="$2"; shift 2 ;;
        --level) LEVEL="$2"; shift 2 ;;
        --members) MEMBERS="$2"; shift 2 ;;
        --interleave) INTERLEAVE="$2"; shift 2 ;;
        --threads) THREADS="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        -h|--help) usage 0 ;;
        *) echo "serve.sh: unknown argument: $1" >&2; usage 2 >&2 ;;
    esac
done

die() { echo "serve.sh: $*" >&2; exit 1; }

case "$RUNS" in ''|*[!0-9]*|0) die "--runs wants a positive integer" ;; esac
case "$RUNTIME" in ''|*[!0-9]*|0) die "--runtime wants a positive number of seconds" ;; esac
case "$MEMBERS" in ''|*[!0-9]*|0) die "--members wants a positive integer" ;; esac

for tool in fio nbdkit python3 cargo; do
    command -v "$tool" >/dev/null || die "needs $tool (Debian: apt-get install fio nbdkit python3)"
done
fio --enghelp=nbd >/dev/null 2>&1 || die "this fio has no nbd engine (Debian's fio has it)"
[ -d /dev/shm ] && [ -w /dev/shm ] || die "needs a writable /dev/shm (tmpfs)"

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

ROOT=$(cd "$(dirname "$0")/.." && pwd)
SIZE_BYTES=$(bytes "$SIZE")
IL_BYTES=$(bytes "$INTERLEAVE")
case "$LEVEL" in
    stripe|concat) DATA_MEMBERS=$MEMBERS ;;
    mirror) DATA_MEMBERS=1 ;;
    raid10) DATA_MEMBERS=$((MEMBERS / 2)) ;;
    raid5) DATA_MEMBERS=$((MEMBERS - 1)) ;;
    raid6) DATA_MEMBERS=$((MEMBERS - 2)) ;;
    *) die "unknown --level $LEVEL" ;;
esac
[ "$DATA_MEMBERS" -ge 1 ] || die "too few members for $LEVEL"
# Each member: a 1 MiB label area, then its share of the data rounded up to
# a whole interleave. The volume may come out a little larger than --size;
# its exact size is read back from platter and used for nbdkit too.
PER_MEMBER=$(( (SIZE_BYTES / DATA_MEMBERS + IL_BYTES - 1) / IL_BYTES * IL_BYTES ))
MEMBER_BYTES=$(( PER_MEMBER + (1 << 20) ))

if [ -z "$OUT" ]; then
    OUT="$ROOT/target/bench/serve-$(date -u +%Y%m%dT%H%M%SZ)"
fi
mkdir -p "$OUT"

echo "== building the release binary"
(cd "$ROOT" && cargo build --release --bin platter) >&2
PLATTER="$ROOT/target/release/platter"
[ -x "$PLATTER" ] || die "no $PLATTER after the build"

WORK=$(mktemp -d -p /dev/shm platter-bench.XXXXXX)
PLATTER_PID=""
NBDKIT_PID=""

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
    local rc=$?
    trap - EXIT INT TERM
    stop_pid "$PLATTER_PID"
    stop_pid "$NBDKIT_PID"
    rm -rf "$WORK"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- platter -----------------------------------------------------------------
echo "== creating a $LEVEL volume over $MEMBERS tmpfs members in $WORK"
MEMBER_PATHS=()
for i in $(seq 0 $((MEMBERS - 1))); do
    MEMBER_PATHS+=("$WORK/m$i")
done
"$PLATTER" create --level "$LEVEL" --interleave "$INTERLEAVE" \
    --member-size "$MEMBER_BYTES" --name bench "${MEMBER_PATHS[@]}" >"$OUT/create.txt"

PLATTER_SOCK="$WORK/platter.sock"
NO_COLOR=1 "$PLATTER" serve --socket "$PLATTER_SOCK" --threads "$THREADS" "${MEMBER_PATHS[@]}" \
    >"$OUT/platter.out" 2>"$OUT/platter.log" &
PLATTER_PID=$!
for _ in $(seq 300); do
    grep -q "^serving '" "$OUT/platter.out" 2>/dev/null && break
    kill -0 "$PLATTER_PID" 2>/dev/null || die "platter serve exited: $(tail -n 5 "$OUT/platter.log")"
    sleep 0.1
done
READY=$(grep "^serving '" "$OUT/platter.out" || true)
[ -n "$READY" ] || die "platter serve did not get ready in 30 s"
EXPORT=$(sed -n "s/^serving '\([^']*\)'.*/\1/p" <<<"$READY")
VOLUME_BYTES=$(sed -n "s/^serving '[^']*' ([^,]*, \([0-9]*\) bytes).*/\1/p" <<<"$READY")
[ -n "$VOLUME_BYTES" ] || die "cannot read the volume size from: $READY"
PLATTER_URI="nbd+unix:///$EXPORT?socket=$PLATTER_SOCK"

# --- nbdkit ------------------------------------------------------------------
REF="$WORK/reference.img"
truncate -s "$VOLUME_BYTES" "$REF"
NBDKIT_SOCK="$WORK/nbdkit.sock"
nbdkit --unix "$NBDKIT_SOCK" --foreground --exit-with-parent file "$REF" \
    >"$OUT/nbdkit.log" 2>&1 &
NBDKIT_PID=$!
for _ in $(seq 300); do
    [ -S "$NBDKIT_SOCK" ] && break
    kill -0 "$NBDKIT_PID" 2>/dev/null || die "nbdkit exited: $(tail -n 5 "$OUT/nbdkit.log")"
    sleep 0.1
done
[ -S "$NBDKIT_SOCK" ] || die "nbdkit did not listen in 30 s"
NBDKIT_URI="nbd+unix:///?socket=$NBDKIT_SOCK"

# --- fio ---------------------------------------------------------------------
# name rw bs iodepth
JOBS=(
    "seq-read read 1M 8"
    "seq-write write 1M 8"
    "rand-read randread 4k 32"
    "rand-write randwrite 4k 32"
)

fio_run() {
    # $1 uri, $2 output file, $3 rw, $4 bs, $5 iodepth, $6 runtime or "" for
    # one pass over the device
    local timing=(--time_based "--runtime=$6")
    [ -n "$6" ] || timing=()
    fio --name=job --ioengine=nbd "--uri=$1" "--rw=$3" "--bs=$4" "--iodepth=$5" \
        --numjobs=1 "--size=$VOLUME_BYTES" "${timing[@]}" --randrepeat=0 \
        --output-format=json "--output=$2" >/dev/null
}

{
    echo "date:      $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "host:      $(uname -srm), $(nproc) CPUs"
    echo "cpu:       $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)"
    echo "fio:       $(fio --version)"
    echo "nbdkit:    $(nbdkit --version)"
    echo "platter:   $("$PLATTER" --version)"
    echo "volume:    $LEVEL, $MEMBERS members, interleave $INTERLEAVE, $VOLUME_BYTES bytes, --threads $THREADS"
    echo "reference: nbdkit file plugin, one tmpfs file of $VOLUME_BYTES bytes"
    echo "jobs:      ${RUNTIME} s each, time_based, size = whole device, $RUNS runs"
} | tee "$OUT/environment.txt"

# Fill both devices once so that reads hit allocated pages on both sides.
echo "== filling both devices"
fio_run "$PLATTER_URI" "$OUT/fill-platter.json" write 1M 8 ""
fio_run "$NBDKIT_URI" "$OUT/fill-nbdkit.json" write 1M 8 ""

for run in $(seq 1 "$RUNS"); do
    for job in "${JOBS[@]}"; do
        read -r name rw bs depth <<<"$job"
        for side in platter nbdkit; do
            if [ "$side" = platter ]; then uri=$PLATTER_URI; else uri=$NBDKIT_URI; fi
            kill -0 "$PLATTER_PID" 2>/dev/null || die "platter serve died: $(tail -n 5 "$OUT/platter.log")"
            kill -0 "$NBDKIT_PID" 2>/dev/null || die "nbdkit died"
            echo "== run $run/$RUNS: $name ($rw, bs $bs, iodepth $depth) on $side"
            fio_run "$uri" "$OUT/$name-$side-$run.json" "$rw" "$bs" "$depth" "$RUNTIME"
        done
    done
done

# platter must stop cleanly on SIGTERM.
kill -TERM "$PLATTER_PID"
PLATTER_RC=0
wait "$PLATTER_PID" || PLATTER_RC=$?
PLATTER_PID=""
[ "$PLATTER_RC" -eq 0 ] || echo "serve.sh: warning: platter serve exited $PLATTER_RC after SIGTERM" >&2

python3 - "$OUT" "$RUNS" <<'EOF' | tee "$OUT/summary.txt"
import json, statistics, sys
out, runs = sys.argv[1], int(sys.argv[2])
jobs = [("seq-read", "read", "1M", 8), ("seq-write", "write", "1M", 8),
        ("rand-read", "read", "4k", 32), ("rand-write", "write", "4k", 32)]

def load(path):
    text = open(path).read()
    # fio may print notes before the JSON document.
    return json.loads(text[text.index("{"):])

def result(name, side, run, direction):
    j = load(f"{out}/{name}-{side}-{run}.json")["jobs"][0]
    if j.get("error"):
        sys.exit(f"{name} on {side}, run {run}: fio error {j['error']}")
    d = j[direction]
    return d["iops"], d["bw_bytes"] / (1 << 20)

print()
print(f"{runs} run(s); IOPS are medians; ratio = median of the per-pair platter/nbdkit ratios (> 1: platter faster)")
print()
hdr = f"{'job':<22}{'platter IOPS':>13}{'MiB/s':>9}{'nbdkit IOPS':>13}{'MiB/s':>9}{'ratio':>8}  pair ratios"
print(hdr)
print("-" * len(hdr))
for name, direction, bs, depth in jobs:
    p = [result(name, "platter", r, direction) for r in range(1, runs + 1)]
    n = [result(name, "nbdkit", r, direction) for r in range(1, runs + 1)]
    p_iops = statistics.median(x[0] for x in p)
    p_bw = statistics.median(x[1] for x in p)
    n_iops = statistics.median(x[0] for x in n)
    n_bw = statistics.median(x[1] for x in n)
    pairs = [a[0] / b[0] if b[0] else float("nan") for a, b in zip(p, n)]
    label = f"{name} {bs} qd{depth}"
    # DESIGN.md: the figure quoted is the median of the per-pair ratios,
    # each pair measured back to back, which cancels slow drifts in load.
    ratio = statistics.median(pairs)
    print(f"{label:<22}{p_iops:>13.0f}{p_bw:>9.1f}{n_iops:>13.0f}{n_bw:>9.1f}{ratio:>8.2f}  "
          + " ".join(f"{r:.2f}" for r in pairs))
print()
print(f"raw fio JSON, logs and this table: {out}")
EOF
