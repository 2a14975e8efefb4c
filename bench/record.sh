#!/usr/bin/env bash
# What recording the clients' requests costs (issue 19: `serve --record`).
# See bench/README.md.
#
#   bench/record.sh [--runs N] [--runtime SECS] [--platter BIN] [--out DIR]
#
# A raid5 of 4 tmpfs members (64 MiB each) is served without and with
# `--record FILE` (FILE on tmpfs too), and fio measures, against each:
#   randread   random 4k reads at queue depth 16
#   randwrite  random 4k writes at queue depth 16
# for RUNTIME seconds (default 5). tmpfs members are the hardest case: the
# volume answers fastest, so the recording's share of each request is
# largest. The table shows, per job, the median over the runs (default 3)
# of IOPS while recording / IOPS without. Target: >= 0.9.

set -euo pipefail
. "$(dirname "$0")/lib.sh"

RUNS=3
RUNTIME=5
OUT=""
PLATTER=""

bench_options "$@"
bench_setup record

# start NAME ARGS...: serves the raid5 with ARGS; sets PID and URI.
start() {
    local name="$1"
    shift
    serve_members "$name" "$@" "${MEMBERS[@]}"
}

stop() { stop_served "$1"; }

# iops URI RW: fio's IOPS for random 4k RW at queue depth 16.
iops() {
    fio --name=r --ioengine=nbd --uri="$1" --rw="$2" --bs=4k --iodepth=16 --size=128M \
        --time_based --runtime="$RUNTIME" --output-format=json 2>/dev/null |
        python3 -c 'import json, sys
t = sys.stdin.read()
j = json.loads(t[t.index("{"):])["jobs"][0]
print(j["read"]["iops"] + j["write"]["iops"])'
}

MEMBERS=("$WORK/m0" "$WORK/m1" "$WORK/m2" "$WORK/m3")
"$PLATTER" create --level raid5 --interleave 64k --member-size 64M --name r5 "${MEMBERS[@]}" >/dev/null

declare -A RATIOS=()
for run in $(seq "$RUNS"); do
    for rw in randread randwrite; do
        start plain
        plain=$(iops "${URI[plain]}" "$rw")
        stop plain
        rm -f "$WORK/load.iolog"
        start rec --record "$WORK/load.iolog"
        rec=$(iops "${URI[rec]}" "$rw")
        stop rec
        lines=$(($(wc -l <"$WORK/load.iolog") - 4))
        grep -q "recording stopped" "$OUT/rec.log" && grep -q "could not keep up\|bound" "$OUT/rec.log" &&
            die "$rw: the recording stopped early: $(grep -m1 'recording stopped' "$OUT/rec.log")"
        ratio=$(python3 -c "print(f'{$rec / $plain:.2f}')")
        RATIOS[$rw]+="$ratio "
        printf '%s run %s: %.0f IOPS without, %.0f recording (%s requests recorded)\n' \
            "$rw" "$run" "$plain" "$rec" "$lines" | tee -a "$OUT/runs.txt"
    done
done

median() { python3 -c 'import statistics, sys; print(f"{statistics.median(map(float, sys.argv[1:])):.2f}")' $1; }
{
    printf '%-10s %8s %8s  %s\n' job median target ratios
    for rw in randread randwrite; do
        printf '%-10s %8s %8s  %s\n' "$rw" "$(median "${RATIOS[$rw]}")" ">= 0.9" "${RATIOS[$rw]}"
    done
} | tee "$OUT/summary.txt"
echo "(IOPS recording / IOPS without, tmpfs members; results in $OUT)"
