#!/usr/bin/env bash
# Subdisk moves and a drive's evacuation through a pool's server, against
# the drives' own sequential speed, and what a move at the default rate
# costs the clients. A pool of 5 drives: a raid5 `r` on d0-d2 (subdisks of
# about 513 MiB) and a concat `c` on d3. Each run, clients idle:
# `subdisk move r.p0.s1 --to d4 --rate unlimited` (timed until `list`
# shows it moved), then `pool evacuate d4 --rate unlimited` (timed until
# d4 is empty; then `pool remove-drive d4` and `pool add-drive` it again,
# up, as a retired drive comes back). The reference, measured in the same run: 1 MiB
# sequential reads and writes (fio, iodepth 1) of a scratch file on the
# same filesystem, served by nbdkit's file plugin (with its delay filter at
# --latency); the slower of the two is "the slower drive's bandwidth", as
# the move reads one drive and writes another. Then 4k random reads on r
# (iodepth 8) for --runtime seconds idle, and again while r.p0.s1 moves
# at the default rate (128 MiB/s): their IOPS ratio. Medians of the runs.
#
#   bench/move.sh [--runs N] [--runtime SECS] [--latency T|none]
#                 [--platter BIN] [--out DIR] [--dir DIR]
#
# --latency T gives every drive --inject latency=T (the move's copy gets
# it too) and the reference nbdkit's delay filter rdelay=T wdelay=T.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

RUNS=3
RUNTIME=4
LATENCY=none
OUT=""
PLATTER=""
MEMBER_DIR=""

bench_options "$@"
command -v nbdkit >/dev/null || die "needs nbdkit (Debian: apt-get install nbdkit)"
bench_setup move

inject=none
[ "$LATENCY" = none ] || inject="latency=$LATENCY"
mkdir "$WORK/pool"
drives=()
for i in 0 1 2 3 4; do drives+=("$WORK/pool/d$i"); done
"$PLATTER" pool create tank --drive-size 1100M "${drives[@]}" >"$OUT/pool-create.txt"
"$PLATTER" volume create tank r --level raid5 --size 1G --drives d0,d1,d2 "$WORK/pool" \
    >>"$OUT/pool-create.txt"
"$PLATTER" volume create tank c --level concat --size 256M --drives d3 "$WORK/pool" \
    >>"$OUT/pool-create.txt"
pool_inject=()
[ "$inject" = none ] || for d in "${drives[@]}"; do pool_inject+=(--inject "$d=$inject"); done
NO_COLOR=1 "$PLATTER" serve --pool tank --socket "$WORK/pool.sock" ${pool_inject[@]+"${pool_inject[@]}"} \
    "$WORK/pool" >"$OUT/pool.out" 2>"$OUT/pool.log" &
PID[pool]=$!
wait_ready pool
CTL="$WORK/pool.sock.ctl"
URI_R="nbd+unix:///r?socket=$WORK/pool.sock"
# r written whole: a move copies what is there.
fio --name=fill --ioengine=nbd "--uri=$URI_R" --rw=write --bs=1M --iodepth=8 --size=1G \
    --output="$OUT/fill.txt" >/dev/null

# The reference drive: a scratch file served by nbdkit.
truncate -s 1G "$WORK/scratch"
filter=() delay=()
[ "$LATENCY" = none ] || filter=(--filter=delay) delay=("rdelay=$LATENCY" "wdelay=$LATENCY")
nbdkit --exit-with-parent -f -U "$WORK/ref.sock" ${filter[@]+"${filter[@]}"} file "$WORK/scratch" \
    ${delay[@]+"${delay[@]}"} 2>"$OUT/nbdkit.log" &
PID[nbdkit]=$!
for _ in $(seq 100); do [ -S "$WORK/ref.sock" ] && break; sleep 0.1; done
[ -S "$WORK/ref.sock" ] || die "nbdkit did not start: $(tail -n 3 "$OUT/nbdkit.log")"
URI_REF="nbd+unix:///?socket=$WORK/ref.sock"

{
    bench_machine
    echo "latency:   $LATENCY; $RUNS runs; client jobs ${RUNTIME} s"
} | tee "$OUT/environment.txt"

# where SUBDISK: the drive list shows it on, and its length.
where() {
    "$PLATTER" list --json "$WORK/pool" | python3 -c '
import json, sys
p = json.load(sys.stdin)[0]
for v in p["volumes"]:
    for pl in v["plexes"]:
        for s in pl["subdisks"]:
            if s["name"] == sys.argv[1]:
                print(s["drive"], s["len_bytes"], "moving" if s.get("moving") else "still")
' "$1"
}

# on DRIVE: the bytes of the subdisks on it (0 once empty, no move left).
on() {
    "$PLATTER" list --json "$WORK/pool" | python3 -c '
import json, sys
p = json.load(sys.stdin)[0]
subs = [s for v in p["volumes"] for pl in v["plexes"] for s in pl["subdisks"]]
moving = any(s.get("moving") for s in subs)
print(-1 if moving else sum(s["len_bytes"] for s in subs if s["drive"] == sys.argv[1]))
' "$1"
}

# wait_on_drive SUBDISK DRIVE: until SUBDISK lies on DRIVE, moved.
wait_on_drive() {
    local w
    for _ in $(seq 6000); do
        read -r -a w <<<"$(where "$1")"
        [ "${w[0]}" = "$2" ] && [ "${w[2]}" = still ] && return
        kill -0 "${PID[pool]}" 2>/dev/null || die "the server died: see $OUT/pool.log"
        sleep 0.05
    done
    die "$1 did not reach $2"
}

# retire_and_return DRIVE: an evacuated drive (leaving) taken out and
# added again, up, for the next run to move onto.
retire_and_return() {
    "$PLATTER" pool remove-drive tank "$1" --control "$CTL" >/dev/null
    "$PLATTER" pool add-drive tank --drive "$1=$WORK/pool/$1" --control "$CTL" >/dev/null
}

# wait_empty DRIVE
wait_empty() {
    for _ in $(seq 6000); do
        [ "$(on "$1")" = 0 ] && return
        kill -0 "${PID[pool]}" 2>/dev/null || die "the server died: see $OUT/pool.log"
        sleep 0.05
    done
    die "$1 was not emptied"
}

now() { date +%s.%N; }

for run in $(seq 1 "$RUNS"); do
    echo "== run $run/$RUNS: reference drive, 1 MiB sequential read and write"
    for rw in read write; do
        fio --name=ref --ioengine=nbd "--uri=$URI_REF" "--rw=$rw" --bs=1M --iodepth=1 \
            --size=1G --time_based "--runtime=$RUNTIME" --output-format=json \
            "--output=$OUT/ref-$rw-$run.json" >/dev/null
    done

    echo "== run $run/$RUNS: r.p0.s1 moved to d4, clients idle"
    read -r -a w <<<"$(where r.p0.s1)"
    echo "${w[1]}" >"$OUT/move-$run.bytes"
    t0=$(now)
    "$PLATTER" subdisk move tank r.p0.s1 --to d4 --rate unlimited --control "$CTL" >/dev/null
    wait_on_drive r.p0.s1 d4
    echo "$(now) - $t0" | bc >"$OUT/move-$run.secs"

    echo "== run $run/$RUNS: d4 evacuated, clients idle"
    on d4 >"$OUT/evac-$run.bytes"
    t0=$(now)
    "$PLATTER" pool evacuate tank d4 --rate unlimited --control "$CTL" >/dev/null
    wait_empty d4
    echo "$(now) - $t0" | bc >"$OUT/evac-$run.secs"
    retire_and_return d4

    echo "== run $run/$RUNS: 4k random reads on r, idle and during a move at the default rate"
    job=(--name=clients --ioengine=nbd "--uri=$URI_R" --rw=randread --bs=4k --iodepth=8
        --size=1G --time_based "--runtime=$RUNTIME" --randrepeat=0 --output-format=json)
    fio "${job[@]}" "--output=$OUT/idle-$run.json" >/dev/null
    "$PLATTER" subdisk move tank r.p0.s1 --to d4 --control "$CTL" >/dev/null
    fio "${job[@]}" "--output=$OUT/moving-$run.json" >/dev/null
    [ "$(where r.p0.s1 | cut -d' ' -f3)" = moving ] || echo "   (the move ended before the clients did)"
    wait_on_drive r.p0.s1 d4
    "$PLATTER" pool evacuate tank d4 --rate unlimited --control "$CTL" >/dev/null
    wait_empty d4
    retire_and_return d4
done
grep -q "panicked" "$OUT/pool.log" && die "the server panicked: see $OUT/pool.log"

python3 - "$OUT" "$RUNS" <<'EOF' | tee "$OUT/summary.txt"
import json, statistics, sys
out, runs = sys.argv[1], int(sys.argv[2])
def bw(kind, run):
    j = json.load(open(f"{out}/ref-{kind}-{run}.json"))["jobs"][0]
    return j[kind]["bw_bytes"]
def rate(what, run):
    return int(open(f"{out}/{what}-{run}.bytes").read()) / float(open(f"{out}/{what}-{run}.secs").read())
def iops(what, run):
    return json.load(open(f"{out}/{what}-{run}.json"))["jobs"][0]["read"]["iops"]
MIB = 2**20
ref = [min(bw("read", k), bw("write", k)) for k in range(1, runs + 1)]
print()
print(f"slower drive's sequential bandwidth (median): {statistics.median(ref) / MIB:,.0f} MiB/s")
print("| what | MiB/s (median) | / slower drive (runs) |")
print("|---|---|---|")
for what, name in (("move", "subdisk move, clients idle"), ("evac", "drive evacuation, clients idle")):
    rs = [rate(what, k) / ref[k - 1] for k in range(1, runs + 1)]
    mb = statistics.median(rate(what, k) for k in range(1, runs + 1)) / MIB
    print(f"| {name} | {mb:,.0f} | {statistics.median(rs):.2f} (" + ", ".join(f"{r:.2f}" for r in rs) + ") |")
cl = [iops("moving", k) / iops("idle", k) for k in range(1, runs + 1)]
idle = statistics.median(iops("idle", k) for k in range(1, runs + 1))
print()
print(f"client 4k random read IOPS during a move at the default rate / idle: {statistics.median(cl):.2f} ("
      + ", ".join(f"{r:.2f}" for r in cl) + f"); idle {idle:,.0f} IOPS")
EOF
echo "results in $OUT"
