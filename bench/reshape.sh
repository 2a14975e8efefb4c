#!/usr/bin/env bash
# Reshape benchmark: how fast a grow moves the data, and what it leaves to
# clients meanwhile. See bench/README.md.
#
#   bench/reshape.sh [--runs N] [--member-size SIZE] [--latency T]
#                    [--runtime SECS] [--reserve SIZE] [--platter BIN] [--out DIR]
#
# For each kind of member (tmpfs files, and the same with every member given
# `--inject MEMBER=latency=T`, default 2ms), in each run:
#   reference  one member's sequential read speed through platter: a concat
#              of one member, read whole with nbdcopy
#   move       a raid5 of 4 members grown to 5 (`platter grow`), served with
#              the rate limit lifted and no client: the new layout's bytes
#              over the time the move took. Ratio move / reference, target
#              >= 0.5
#   in-place   the grown raid5 then changes its interleave 64k -> 128k on the
#              same members (`platter reshape --control --interleave`), the
#              rate limit lifted: every window is first saved in the
#              members' reserved areas (two flushes of every member per
#              window). Ratio in-place / reference, target >= 0.5
#   clients    fio random 4k reads (qd 16, RUNTIME s, default 5) on the
#              raid5 before the grow, and again while the grow moves at the
#              default rate limit (128M/s). Ratio during / before, target
#              >= 0.5
# --reserve SIZE creates the raid5 with that much room before each member's
# data (`platter create --reserve`). Default 16M: what `platter create`
# gives members of 16 GiB (md's rule, about 0.1%; 129M from 128 GiB),
# which tmpfs cannot hold five of; these 256 MiB members would get 1M, with
# which the in-place move on members with latency is bound to about 0.2
# (bench/README.md): --reserve 1M shows it.
# The table shows the median of each ratio over the runs (default 3).

set -euo pipefail
. "$(dirname "$0")/lib.sh"

RUNS=3
MEMBER_SIZE=256M
LATENCY=2ms
RUNTIME=5
RESERVE=16M
OUT=""
PLATTER=""

bench_option() {
    case "$1" in
        --member-size) MEMBER_SIZE="$2" ;;
        --reserve) RESERVE="$2" ;;
        *) return 1 ;;
    esac
}

bench_options "$@"
command -v nbdcopy >/dev/null || die "needs nbdcopy (Debian: apt-get install libnbd-bin)"
bench_setup reshape

# start NAME INJECT|none MEMBER...: serves the members; sets PID and URI.
start() {
    local name="$1" spec="$2" m inject=()
    shift 2
    for m in "$@"; do
        [ "$spec" = none ] || inject+=(--inject "$m=$spec")
    done
    serve_members "$name" ${inject[@]+"${inject[@]}"} "$@"
}

stop() { stop_served "$1"; }

# reshape_field NAME KEY: a number from the running reshape's status (or
# "done" once it has moved everything).
reshape_field() {
    "$PLATTER" status --json --control "$WORK/$1.sock.ctl" | python3 -c '
import json, sys
r = json.load(sys.stdin)["reshape"]
print("done" if r is None or r["finished"] else r[sys.argv[1]])' "$2"
}

# fio_iops URI: random 4k reads at queue depth 16 for RUNTIME seconds.
fio_iops() {
    fio --name=r --ioengine=nbd --uri="$1" --rw=randread --bs=4k --iodepth=16 --size=256M \
        --time_based --runtime="$RUNTIME" --output-format=json 2>/dev/null |
        python3 -c 'import json, sys; t = sys.stdin.read(); print(json.loads(t[t.index("{"):])["jobs"][0]["read"]["iops"])'
}

secs() { python3 -c 'import time; print(time.monotonic())'; }
ratio() { python3 -c "import sys; print(f'{float(sys.argv[1]) / float(sys.argv[2]):.2f}')" "$1" "$2"; }

declare -A RATIOS=()
for run in $(seq "$RUNS"); do
    for kind in tmpfs latency; do
        spec=none
        [ "$kind" = latency ] && spec="latency=$LATENCY"
        dir="$WORK/$kind-$run"
        mkdir -p "$dir"
        # Reference: one member, read whole.
        "$PLATTER" create --level concat --member-size "$MEMBER_SIZE" --name one \
            "$dir/one" >/dev/null
        start one "$spec" "$dir/one"
        t0=$(secs)
        nbdcopy "${URI[one]}" null:
        t1=$(secs)
        size=$("$PLATTER" status --json --control "$WORK/one.sock.ctl" |
            python3 -c 'import json, sys; print(json.load(sys.stdin)["size_bytes"])')
        stop one
        member_rate=$(python3 -c "print($size / ($t1 - $t0))")

        members=("$dir/m0" "$dir/m1" "$dir/m2" "$dir/m3")
        "$PLATTER" create --level raid5 --interleave 64k --member-size "$MEMBER_SIZE" \
            --reserve "$RESERVE" --name r5 "${members[@]}" >/dev/null
        # Clients before the grow.
        start r5 "$spec" "${members[@]}"
        before=$(fio_iops "${URI[r5]}")
        stop r5
        truncate -s "$MEMBER_SIZE" "$dir/m4"
        "$PLATTER" grow --add "$dir/m4" "${members[@]}" >"$OUT/grow-$kind-$run.txt"
        members+=("$dir/m4")
        # Clients during the grow, at the default rate; then the rest of
        # the move with the limit lifted, timed from here.
        start r5 "$spec" "${members[@]}"
        during=$(fio_iops "${URI[r5]}")
        [ "$(reshape_field r5 position_bytes)" != done ] ||
            die "$kind: the grow ended before fio did; give larger --member-size"
        "$PLATTER" rebuild-rate --control "$WORK/r5.sock.ctl" 100G >/dev/null
        from=$(reshape_field r5 position_bytes)
        total=$(reshape_field r5 total_bytes)
        t0=$(secs)
        while [ "$(reshape_field r5 position_bytes)" != done ]; do sleep 0.05; done
        t1=$(secs)
        move_rate=$(python3 -c "print(($total - $from) / ($t1 - $t0))")
        # The same members, a new interleave: every window backed up.
        t0=$(secs)
        "$PLATTER" reshape --control "$WORK/r5.sock.ctl" --interleave 128k >/dev/null
        total=$(reshape_field r5 total_bytes)
        while [ "$(reshape_field r5 position_bytes)" != done ]; do sleep 0.05; done
        t1=$(secs)
        stop r5
        inplace_rate=$(python3 -c "print($total / ($t1 - $t0))")
        RATIOS[$kind-in-place]+="$(ratio "$inplace_rate" "$member_rate") "
        RATIOS[$kind-move]+="$(ratio "$move_rate" "$member_rate") "
        RATIOS[$kind-clients]+="$(ratio "$during" "$before") "
        printf '%s run %s: member %.0f MB/s, move %.0f MB/s, in place %.0f MB/s, client IOPS %.0f before, %.0f during\n' \
            "$kind" "$run" "$(python3 -c "print($member_rate / 1e6)")" \
            "$(python3 -c "print($move_rate / 1e6)")" "$(python3 -c "print($inplace_rate / 1e6)")" \
            "$before" "$during" | tee -a "$OUT/runs.txt"
        rm -rf "$dir"
    done
done

median() { python3 -c 'import statistics, sys; print(f"{statistics.median(map(float, sys.argv[1:])):.2f}")' $1; }
{
    printf '%-10s %-8s %8s %8s  %s\n' members measure median target ratios
    for kind in tmpfs latency; do
        printf '%-10s %-8s %8s %8s  %s\n' "$kind" move "$(median "${RATIOS[$kind-move]}")" ">= 0.5" "${RATIOS[$kind-move]}"
        printf '%-10s %-8s %8s %8s  %s\n' "$kind" in-place "$(median "${RATIOS[$kind-in-place]}")" ">= 0.5" "${RATIOS[$kind-in-place]}"
        printf '%-10s %-8s %8s %8s  %s\n' "$kind" clients "$(median "${RATIOS[$kind-clients]}")" ">= 0.5" "${RATIOS[$kind-clients]}"
    done
} | tee "$OUT/summary.txt"
echo "(latency: every member --inject latency=$LATENCY; --reserve $RESERVE; results in $OUT)"
