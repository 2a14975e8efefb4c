#!/usr/bin/env bash
# Resync after an outage (issue 16): a mirror over two NBD exports, one
# host killed for --outage seconds under a write load of 10% of what the
# volume takes at most, then started again. How much the returning member
# is rebuilt, against the bitmap regions the load wrote while it was away,
# measured in the same run. See bench/README.md.
#
#   bench/outage.sh [--runs N] [--outage SECS] [--load PERCENT]
#                   [--platter BIN] [--out DIR] [--dir DIR]
#
# Members are 1 GiB files on tmpfs (or --dir), each served by its own
# nbdkit on a Unix socket; the volume keeps its default bitmap regions.
# Each run:
#   1. fio measures the volume's 4k random write IOPS (iodepth 16, 3 s);
#   2. once the bitmap is quiet, fio writes 4k blocks at --load percent of
#      that rate, 90% of them to the first 10% of the volume and the rest
#      over the other 90% (a hot area, as a database's log and tables
#      make), logging each write's offset; 2 s in, host b is killed
#      (SIGKILL);
#   3. the load ends with the outage; host b is started again, and the
#      server brings the member back on its own (it was disconnected);
#   4. resynced = bytes written to member b from its restart until it is
#      active again (the rebuild alone: no client writes then); written
#      meanwhile = distinct bitmap regions fio wrote from the kill on, in
#      bytes.
# Prints the ratio resynced / written meanwhile (issue 16 asks <= 1.2),
# medians over the runs. Not a test: it prints.

set -euo pipefail
. "$(dirname "$0")/lib.sh"

RUNS=3
OUTAGE=10
LOAD=10
OUT=""
PLATTER=""
MEMBER_DIR=""

bench_option() {
    case "$1" in
        --outage) OUTAGE="$2" ;;
        --load) LOAD="$2" ;;
        *) return 1 ;;
    esac
}

bench_options "$@"
bench_positive "$OUTAGE" "--outage wants a positive number of seconds"
bench_positive "$LOAD" "--load wants a whole percentage above 0"
[ "$LOAD" -le 100 ] || die "--load is a percentage, at most 100"
command -v nbdkit >/dev/null || die "needs nbdkit (Debian: apt-get install nbdkit)"
bench_setup outage

# export_member NAME: starts (again) nbdkit serving NAME's file; sets
# PID[NAME] and URI[NAME].
export_member() {
    local name="$1"
    rm -f "$WORK/$name.sock"
    nbdkit -f -U "$WORK/$name.sock" --threads 16 file "file=$WORK/$name.img" \
        >>"$OUT/$name.log" 2>&1 &
    PID[$name]=$!
    for _ in $(seq 100); do [ -S "$WORK/$name.sock" ] && break; sleep 0.1; done
    [ -S "$WORK/$name.sock" ] || die "nbdkit $name did not start: $(tail -n 5 "$OUT/$name.log")"
    URI[$name]="nbd+unix:///?socket=$WORK/$name.sock"
}

ctl() { "$PLATTER" "$1" --json --control "$WORK/mirror/sock.ctl"; }
json() { python3 -c "import json,sys; v=json.load(sys.stdin); print($1)"; }

# wait_for PYTHON-EXPR-ON-STATUS SECS WHAT
wait_for() {
    local until=$((SECONDS + $2))
    while [ "$(ctl status | json "$1")" != True ]; do
        [ $SECONDS -lt $until ] || die "$3: not within $2 s: $(ctl status)"
        sleep 0.2
    done
}

{
    bench_machine "nbdkit $(nbdkit --version | cut -d' ' -f2)"
    echo "outage:    ${OUTAGE} s under ${LOAD}% of the measured write IOPS; $RUNS runs"
} | tee "$OUT/environment.txt"

for run in $(seq 1 "$RUNS"); do
    echo "== run $run/$RUNS"
    rm -rf "$WORK/mirror" "$WORK"/*.img
    truncate -s 1G "$WORK/a.img" "$WORK/b.img"
    export_member a
    export_member b
    "$PLATTER" create --level mirror --name mirror "${URI[a]}" "${URI[b]}" \
        >"$OUT/create-$run.txt"
    mkdir -p "$WORK/mirror"
    NO_COLOR=1 "$PLATTER" serve --socket "$WORK/mirror/sock" "${URI[a]}" "${URI[b]}" \
        >"$OUT/mirror.out" 2>"$OUT/mirror-$run.log" &
    PID[mirror]=$!
    for _ in $(seq 300); do
        grep -q "^serving '" "$OUT/mirror.out" 2>/dev/null && break
        kill -0 "${PID[mirror]}" 2>/dev/null || die "platter serve exited: $(tail -n 5 "$OUT/mirror-$run.log")"
        sleep 0.1
    done
    uri="nbd+unix:///mirror?socket=$WORK/mirror/sock"

    fio --name=max --ioengine=nbd "--uri=$uri" --rw=randwrite --bs=4k --iodepth=16 \
        --size=1G --time_based --runtime=3 --randrepeat=0 --output-format=json \
        "--output=$OUT/max-$run.json" >/dev/null
    max_iops=$(json 'int(v["jobs"][0]["write"]["iops"])' <"$OUT/max-$run.json")
    rate=$((max_iops * LOAD / 100))
    [ "$rate" -gt 0 ] || die "the volume took $max_iops IOPS; $LOAD% of it is nothing"
    # The bitmap's sweeps clear quiet regions every few seconds.
    wait_for 'v["bitmap"]["dirty_regions"] == 0' 60 "a quiet bitmap"

    t0=$(date +%s.%N)
    fio --name=load --ioengine=nbd "--uri=$uri" --rw=randwrite --bs=4k --iodepth=4 \
        --size=1G --random_distribution=zoned:90/10:10/90 "--rate_iops=$rate" --time_based \
        "--runtime=$((OUTAGE + 2))" --randrepeat=0 --write_lat_log="$OUT/load-$run" \
        --log_offset=1 --output-format=json "--output=$OUT/load-$run.json" >/dev/null &
    fio_pid=$!
    sleep 2
    t_kill=$(date +%s.%N)
    kill -KILL "${PID[b]}"
    wait "${PID[b]}" 2>/dev/null || true
    wait "$fio_pid" || die "fio failed under the outage: see $OUT/load-$run.json"
    missed=$(ctl status | json 'v["bitmap"]["missed_regions"]')
    region_bytes=$(ctl status | json 'v["bitmap"]["region_bytes"]')
    before=$(ctl stats | json 'v["members"][1]["bytes_written"]')
    t_back=$(date +%s.%N)
    export_member b
    wait_for 'v["members"][1]["state"] == "active"' 120 "member b back"
    after=$(ctl stats | json 'v["members"][1]["bytes_written"]')
    t_active=$(date +%s.%N)
    regions=$(ctl status | json 'v["bitmap"]["regions"]')
    echo "$run $t0 $t_kill $t_back $t_active $region_bytes $missed $((after - before)) $rate $max_iops $regions" \
        >>"$OUT/runs.txt"
    kill -TERM "${PID[mirror]}"
    wait "${PID[mirror]}" || die "platter serve did not stop cleanly: $(tail -n 5 "$OUT/mirror-$run.log")"
    kill -TERM "${PID[a]}" "${PID[b]}"
    wait "${PID[a]}" "${PID[b]}" 2>/dev/null || true
    unset 'PID[mirror]' 'PID[a]' 'PID[b]'
done

python3 - "$OUT" <<'PY' | tee "$OUT/summary.txt"
import glob, statistics, sys
out = sys.argv[1]
rows = []
for line in open(f"{out}/runs.txt"):
    run, t0, t_kill, t_back, t_active, region, missed, resynced, rate, max_iops, all_regions = line.split()
    region, resynced = int(region), int(resynced)
    since_ms = (float(t_kill) - float(t0)) * 1000
    regions = set()
    writes = 0
    for path in glob.glob(f"{out}/load-{run}_lat.*.log"):
        for rec in open(path):
            f = [x.strip() for x in rec.split(",")]
            # time (ms), latency, direction (1: write), size, offset
            if len(f) >= 5 and f[2] == "1" and float(f[0]) >= since_ms:
                regions.add(int(f[4]) // region)
                writes += 1
    meanwhile = len(regions) * region
    rows.append((int(run), int(max_iops), int(rate), writes, f"{len(regions)} of {all_regions}", int(missed),
                 resynced, meanwhile, resynced / meanwhile if meanwhile else float("nan"),
                 float(t_active) - float(t_back)))
print()
print("| run | max IOPS | load IOPS | writes while away | regions written | missed regions | "
      "resynced | written meanwhile | ratio | back in |")
print("|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    print(f"| {r[0]} | {r[1]:,} | {r[2]:,} | {r[3]:,} | {r[4]} | {r[5]} | {r[6] / 2**20:,.1f} MiB | "
          f"{r[7] / 2**20:,.1f} MiB | {r[8]:.3f} | {r[9]:.1f} s |")
print()
print(f"median ratio resynced / written meanwhile: {statistics.median(r[8] for r in rows):.3f} "
      f"(issue 16 asks <= 1.2)")
PY
echo "results in $OUT"
