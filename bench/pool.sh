#!/usr/bin/env bash
# One pool server against two array servers: two volumes (raid5 and
# raid10, 4 subdisks each at 64k) carved from one pool of 4 drives and
# served by one `platter serve --pool`, against the same two arrays made
# by `platter create` on separate members and served by two servers.
# Both volumes are driven at once; every figure is the pool's over the
# separate servers' (1.00 = the same), measured in the same run. Also
# `platter list` on a pool of 100 volumes over 8 drives: its CPU seconds.
# See bench/README.md and docs/performance.md ("Pools").
#
#   bench/pool.sh [--runs N] [--runtime SECS] [--latency T|none]
#                 [--drives 4|8] [--platter BIN] [--out DIR] [--dir DIR]
#
# --drives 8: the pool has 8 drives and each volume keeps to 4 of its own
# (`volume create --drives`), so that the pool's volumes share no file, as
# the arrays' members do not: what is left is the server's own cost.
#
# Drives and members on tmpfs (or --dir); --latency T gives every drive
# (pool) and every member (arrays) --inject latency=T (default none: tmpfs
# speed; 2ms models a disk). Jobs (fio nbd engine, 32 MiB span, iodepth
# 8, one fio per volume, both at once): 4k random read and write, 1M
# sequential read and write. The table shows per volume and job the median
# over the runs of pool / separate IOPS, and of the servers' CPU seconds
# per GiB moved (pool: its one process; separate: the two summed). Then
# the kernel's part, measured in the same run without platter: two
# writers in one file over each in its own (tmpfs locks a file per write,
# and the pool's volumes share their drives' files), and the same bytes
# read from the pool's drive files over the arrays' member files.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

RUNS=3
RUNTIME=5
LATENCY=none
OUT=""
PLATTER=""
MEMBER_DIR=""
DRIVES=4

bench_option() {
    case "$1" in
        --drives) DRIVES="$2" ;;
        *) return 1 ;;
    esac
}

bench_options "$@"
case "$DRIVES" in 4 | 8) ;; *) die "--drives wants 4 or 8" ;; esac
bench_setup pool

inject=none
[ "$LATENCY" = none ] || inject="latency=$LATENCY"

# The pool: volumes a (raid5) and b (raid10) on 4 drives of 48 MiB, or
# each on 4 of 8 drives of 28 MiB: drives no larger than the volumes need
# (1 MiB of pool area, 17 MiB of a's subdisk, 26 MiB of b's), as the
# arrays' members are. On tmpfs a larger file costs more per page found
# (filemap_get_entry: 12% of the pool server's profile with 160 MiB
# drives, 7.5% of the arrays'), which is the files', not the server's.
drive_size=48M
[ "$DRIVES" = 4 ] || drive_size=28M
mkdir "$WORK/pool"
drives=()
for i in $(seq 0 $((DRIVES - 1))); do drives+=("$WORK/pool/d$i"); done
on_a=() on_b=()
[ "$DRIVES" = 4 ] || on_a=(--drives d0,d1,d2,d3) on_b=(--drives d4,d5,d6,d7)
"$PLATTER" pool create tank --drive-size "$drive_size" "${drives[@]}" >"$OUT/pool-create.txt"
"$PLATTER" volume create tank a --level raid5 --size 48M ${on_a[@]+"${on_a[@]}"} \
    --subdisks 4 "$WORK/pool" >>"$OUT/pool-create.txt"
"$PLATTER" volume create tank b --level raid10 --size 48M ${on_b[@]+"${on_b[@]}"} \
    --subdisks 4 "$WORK/pool" >>"$OUT/pool-create.txt"
pool_inject=()
[ "$inject" = none ] || for d in "${drives[@]}"; do pool_inject+=(--inject "$d=$inject"); done
NO_COLOR=1 "$PLATTER" serve --pool tank --socket "$WORK/pool.sock" ${pool_inject[@]+"${pool_inject[@]}"} \
    "$WORK/pool" >"$OUT/pool.out" 2>"$OUT/pool.log" &
PID[pool]=$!
wait_ready pool
URI[pool-a]="nbd+unix:///a?socket=$WORK/pool.sock"
URI[pool-b]="nbd+unix:///b?socket=$WORK/pool.sock"

# The arrays: the same levels on members of their own.
SERVE_ARGS=()
serve sep-a raid5 4 64k "$inject"
serve sep-b raid10 4 64k "$inject"

# name: rw bs
declare -A JOB=(
    [rand-read]="randread 4k"
    [rand-write]="randwrite 4k"
    [seq-read]="read 1M"
    [seq-write]="write 1M"
)
ORDER=(rand-write rand-read seq-write seq-read)

{
    bench_machine
    echo "drives:    $DRIVES in the pool; latency $LATENCY; $RUNS runs of ${RUNTIME} s per job"
} | tee "$OUT/environment.txt"

# cpu_ticks PID...: user + system ticks of the processes, summed.
cpu_ticks() {
    local p sum=0
    for p in "$@"; do
        sum=$((sum + $(awk '{print $14 + $15}' "/proc/$p/stat")))
    done
    echo "$sum"
}

# both SETUP JOB RUN: fio on volumes a and b of SETUP (pool or sep) at once.
both() {
    local setup="$1" job="$2" run="$3" rw bs v pids=()
    read -r rw bs <<<"${JOB[$job]}"
    for v in a b; do
        fio --name=job --ioengine=nbd "--uri=${URI[$setup-$v]}" "--rw=$rw" "--bs=$bs" \
            --iodepth=8 --numjobs=1 --size=32M --time_based "--runtime=$RUNTIME" \
            --randrepeat=0 --output-format=json \
            "--output=$OUT/$setup-$v-$job-$run.json" >/dev/null &
        pids+=($!)
    done
    wait "${pids[@]}"
}

for run in $(seq 1 "$RUNS"); do
    for job in "${ORDER[@]}"; do
        for setup in pool sep; do
            servers=("${PID[pool]}")
            [ "$setup" = pool ] || servers=("${PID[sep-a]}" "${PID[sep-b]}")
            for p in "${servers[@]}"; do kill -0 "$p" 2>/dev/null || die "a server died: see $OUT"; done
            echo "== run $run/$RUNS: $job on $setup"
            before=$(cpu_ticks "${servers[@]}")
            both "$setup" "$job" "$run"
            echo $(($(cpu_ticks "${servers[@]}") - before)) >"$OUT/$setup-$job-$run.ticks"
        done
    done
done

# The kernel's share: two writers of 64 KiB blocks (psync) in two halves
# of one file against each in a file of its own, on the same filesystem
# (tmpfs takes a file's lock for each write: the pool's volumes share
# their drives' files, the arrays' members do not). No platter here.
control_bw() {
    local one="$1" run="$2" a b
    rm -f "$WORK/ctl1" "$WORK/ctl2"
    if [ "$one" = one ]; then
        truncate -s 128M "$WORK/ctl1"
        a=(--filename="$WORK/ctl1" --offset=0) b=(--filename="$WORK/ctl1" --offset=64M)
    else
        truncate -s 64M "$WORK/ctl1" "$WORK/ctl2"
        a=(--filename="$WORK/ctl1" --offset=0) b=(--filename="$WORK/ctl2" --offset=0)
    fi
    fio --output-format=json "--output=$OUT/control-$one-$run.json" \
        --name=a "${a[@]}" --size=64M --rw=write --bs=64k --ioengine=psync --time_based \
        "--runtime=$RUNTIME" \
        --name=b "${b[@]}" --size=64M --rw=write --bs=64k --ioengine=psync --time_based \
        "--runtime=$RUNTIME" >/dev/null
}
for run in $(seq 1 "$RUNS"); do
    echo "== run $run/$RUNS: kernel control, one file and two"
    control_bw one "$run"
    control_bw two "$run"
done
rm -f "$WORK/ctl1" "$WORK/ctl2"

# The files' part in reads, measured in the same run without platter: the
# bytes the volumes' sequential jobs read (each subdisk's or member's
# first MiB, its label area, and the 32 MiB span's share of it: a third
# for raid5, a half for raid10), read straight from the pool's drive files
# and from the arrays' member files (fio psync, 64 KiB, all at once). The
# same bytes on the same tmpfs; the pool's were written by two volumes in
# one file, the arrays' each in its own.
"$PLATTER" list "$WORK/pool" --json >"$OUT/pool-list.json"
read_jobs() {
    local setup="$1"
    python3 - "$OUT/pool-list.json" "$WORK" "$setup" <<'PY'
import json, sys
pools, work, setup = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3]
MIB, SPAN = 1 << 20, 32 << 20
share = {"raid5": SPAN // 3, "raid10": SPAN // 2}
drives = {d["name"]: d["device"] for d in pools[0]["drives"]}
for v, sep in (("a", "sep-a"), ("b", "sep-b")):
    vol = next(x for x in pools[0]["volumes"] if x["name"] == v)
    plex = vol["plexes"][0]
    length = MIB + share[plex["org"]]
    for i, sd in enumerate(plex["subdisks"]):
        if setup == "pool":
            path, offset = drives[sd["drive"]], sd["offset_bytes"]
        else:
            path, offset = f"{work}/{sep}/m{i}", 0
        print(f"--name=r{v}{i} --filename={path} --offset={offset} --size={length}")
PY
}
read_control() {
    local setup="$1" run="$2" jobs
    mapfile -t jobs < <(read_jobs "$setup")
    # shellcheck disable=SC2068
    fio --output-format=json "--output=$OUT/readctl-$setup-$run.json" --rw=read --bs=64k \
        --ioengine=psync --time_based "--runtime=$RUNTIME" --group_reporting \
        ${jobs[@]} >/dev/null
}
for run in $(seq 1 "$RUNS"); do
    echo "== run $run/$RUNS: files' read control, pool drives and array members"
    read_control pool "$run"
    read_control sep "$run"
done

# platter list on a pool of 100 volumes over 8 drives.
mkdir "$WORK/big"
big=()
for i in $(seq 0 7); do big+=("$WORK/big/d$i"); done
"$PLATTER" pool create big --drive-size 512M "${big[@]}" >/dev/null
for i in $(seq 1 100); do
    "$PLATTER" volume create big "v$i" --level raid5 --size 4M --subdisks 4 "$WORK/big" >/dev/null
done
TIMEFORMAT='%U %S'
{ time "$PLATTER" list "$WORK/big" >"$OUT/list-100.txt"; } 2>"$OUT/list-100.time"
list_cpu=$(tail -n 1 "$OUT/list-100.time")

python3 - "$OUT" "$RUNS" "$list_cpu" <<'EOF' | tee "$OUT/summary.txt"
import json, statistics, sys
out, runs, list_cpu = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def result(setup, v, job, run):
    j = json.load(open(f"{out}/{setup}-{v}-{job}-{run}.json"))["jobs"][0]
    side = j["read"] if j["read"]["io_bytes"] else j["write"]
    return side["iops"], side["io_bytes"]
def cpu_per_gib(setup, job, run):
    ticks = int(open(f"{out}/{setup}-{job}-{run}.ticks").read())
    moved = sum(result(setup, v, job, run)[1] for v in "ab")
    return ticks / 100 / (moved / 2**30)
print()
print("| job | volume | separate IOPS (median) | pool / separate (runs) | CPU s/GiB: pool / separate (runs) |")
print("|---|---|---|---|---|")
for job in ("rand-write", "rand-read", "seq-write", "seq-read"):
    cpu = [cpu_per_gib("pool", job, k) / cpu_per_gib("sep", job, k) for k in range(1, runs + 1)]
    for v, name in (("a", "raid5"), ("b", "raid10")):
        sep = [result("sep", v, job, k)[0] for k in range(1, runs + 1)]
        rs = [result("pool", v, job, k)[0] / result("sep", v, job, k)[0] for k in range(1, runs + 1)]
        print(f"| {job} | {name} | {statistics.median(sep):,.0f} | {statistics.median(rs):.2f} ("
              + ", ".join(f"{r:.2f}" for r in rs) + f") | {statistics.median(cpu):.2f} ("
              + ", ".join(f"{r:.2f}" for r in cpu) + ") |")
def control_bw(one, run):
    jobs = json.load(open(f"{out}/control-{one}-{run}.json"))["jobs"]
    return sum(j["write"]["bw_bytes"] for j in jobs)
ctl = [control_bw("one", k) / control_bw("two", k) for k in range(1, runs + 1)]
print()
print(f"kernel control, two writers in one file / in two files: {statistics.median(ctl):.2f} ("
      + ", ".join(f"{r:.2f}" for r in ctl) + ")")
def read_bw(setup, run):
    return json.load(open(f"{out}/readctl-{setup}-{run}.json"))["jobs"][0]["read"]["bw_bytes"]
rctl = [read_bw("pool", k) / read_bw("sep", k) for k in range(1, runs + 1)]
print(f"files' read control, the same bytes from the pool's drives / the arrays' members: "
      f"{statistics.median(rctl):.2f} (" + ", ".join(f"{r:.2f}" for r in rctl) + ")")
user, system = (float(x) for x in list_cpu.split())
print()
print(f"platter list, 100 volumes over 8 drives: {user + system:.2f} CPU seconds "
      f"(user {user:.2f}, system {system:.2f})")
EOF
echo "results in $OUT"
