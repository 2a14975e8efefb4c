#!/usr/bin/env bash
# CPU cost per request of `platter serve`: the server's user and system CPU
# time (from /proc/PID/stat) over one fio job, divided by the requests fio
# completed, and the machine's idle time over the job. Where bench/serve.sh
# gives ratios, this says where a difference comes from: e.g. RAID-5 against
# stripe for 1 MiB sequential writes (docs/performance.md, "Where the time
# goes").
#
#   bench/cost.sh [--level LEVEL]... [--rw RW] [--bs SIZE] [--iodepth N]
#                 [--runtime SECS] [--members N] [--platter BIN]
#                 [--pin SERVER_CPUS:CLIENT_CPUS]
#
# --level nbdkit measures nbdkit's file plugin serving one tmpfs file of the
# members' total size, for reference.
# Defaults: --level stripe --level raid5, --rw write, --bs 1M, --iodepth 8,
# --runtime 6, 4 members of 400 MiB in /dev/shm, 64k interleave. Each level
# gets a 4 s warm-up job first (the members' pages exist afterwards).
# --pin 1:0 runs the server under `taskset -c 1` and fio under `taskset -c
# 0` (as bench/serve.sh --pin): the server's cost on a CPU of its own.

set -euo pipefail

LEVELS=()
RW=write
BS=1M
IODEPTH=8
RUNTIME=6
MEMBERS=4
PLATTER=""
SERVER_PIN=()
CLIENT_PIN=()

die() { echo "cost.sh: $*" >&2; exit 2; }

while [ $# -gt 0 ]; do
    case "$1" in
        --level) LEVELS+=("$2"); shift 2 ;;
        --rw) RW="$2"; shift 2 ;;
        --bs) BS="$2"; shift 2 ;;
        --iodepth) IODEPTH="$2"; shift 2 ;;
        --runtime) RUNTIME="$2"; shift 2 ;;
        --members) MEMBERS="$2"; shift 2 ;;
        --platter) PLATTER="$2"; shift 2 ;;
        --pin)
            [[ "$2" =~ ^[0-9,-]+:[0-9,-]+$ ]] || { echo "cost.sh: --pin wants SERVER_CPUS:CLIENT_CPUS (1:0), not $2" >&2; exit 1; }
            SERVER_PIN=(taskset -c "${2%%:*}"); CLIENT_PIN=(taskset -c "${2##*:}"); shift 2 ;;
        -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument $1 (see --help)" ;;
    esac
done
[ ${#LEVELS[@]} -gt 0 ] || LEVELS=(stripe raid5)
command -v fio >/dev/null || die "needs fio (Debian: apt-get install fio)"

ROOT=$(cd "$(dirname "$0")/.." && pwd)
if [ -z "$PLATTER" ]; then
    (cd "$ROOT" && cargo build --release --bin platter) >&2
    PLATTER="${CARGO_TARGET_DIR:-$ROOT/target}/release/platter"
fi

TICKS=$(getconf CLK_TCK)
WORK=$(mktemp -d -p /dev/shm platter-cost.XXXXXX)
SERVER=""
cleanup() {
    [ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null && wait "$SERVER" 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT

cpu_ticks() { awk '{print $14, $15}' "/proc/$1/stat"; }
idle_ticks() { awk '/^cpu /{print $5}' /proc/stat; }

printf '%-8s %9s %12s %12s %12s %8s\n' level requests/s "user us/req" "sys us/req" "total us/req" idle
n=0
for level in "${LEVELS[@]}"; do
    n=$((n + 1))
    d="$WORK/$n-$level"
    mkdir "$d"
    paths=()
    for i in $(seq 0 $((MEMBERS - 1))); do
        truncate -s 400M "$d/m$i"
        paths+=("$d/m$i")
    done
    if [ "$level" = nbdkit ]; then
        command -v nbdkit >/dev/null || die "needs nbdkit (Debian: apt-get install nbdkit)"
        rm -f "${paths[@]}"
        truncate -s $((MEMBERS * 400))M "$d/reference.img"
        "${SERVER_PIN[@]}" nbdkit --unix "$d/sock" --foreground --exit-with-parent \
            file "$d/reference.img" >"$d/log" 2>&1 &
        uri="nbd+unix:///?socket=$d/sock"
    else
        "$PLATTER" create --level "$level" --interleave 64k --name v "${paths[@]}" >/dev/null
        NO_COLOR=1 "${SERVER_PIN[@]}" "$PLATTER" serve --socket "$d/sock" "${paths[@]}" >"$d/log" 2>&1 &
        uri="nbd+unix:///v?socket=$d/sock"
    fi
    SERVER=$!
    for _ in $(seq 100); do [ -S "$d/sock" ] && break; sleep 0.1; done
    [ -S "$d/sock" ] || die "$level: the server did not listen: $(tail -n 3 "$d/log")"
    job=("${CLIENT_PIN[@]}" fio --name=cost --ioengine=nbd "--uri=$uri" "--rw=$RW"
         "--bs=$BS" "--iodepth=$IODEPTH" --size=1G --time_based --output-format=json)
    "${job[@]}" --runtime=4 --output="$d/warm.json" >/dev/null
    read -r u0 s0 < <(cpu_ticks "$SERVER")
    i0=$(idle_ticks)
    "${job[@]}" "--runtime=$RUNTIME" --output="$d/fio.json" >/dev/null
    read -r u1 s1 < <(cpu_ticks "$SERVER")
    i1=$(idle_ticks)
    kill "$SERVER"
    wait "$SERVER" 2>/dev/null || true
    SERVER=""
    python3 - "$d/fio.json" "$level" "$((u1 - u0))" "$((s1 - s0))" "$((i1 - i0))" \
        "$TICKS" "$RUNTIME" "$(nproc)" <<'PY'
import json, sys
path, level, user, sys_, idle, hz, secs, cpus = sys.argv[1:]
j = json.load(open(path))["jobs"][0]
reqs = j["read"]["total_ios"] + j["write"]["total_ios"]
user, sys_, idle, hz, secs, cpus = map(int, (user, sys_, idle, hz, secs, cpus))
us = lambda t: t / hz * 1e6 / reqs
print(f"{level:8s} {reqs / secs:9.0f} {us(user):12.1f} {us(sys_):12.1f} "
      f"{us(user + sys_):12.1f} {idle / (hz * secs * cpus):7.0%}")
PY
done
