# Shared by the benchmarks that serve volumes (checksums, latency, outage,
# ppl, record, remote, reshape, serve, sim_vs_served): their command line,
# the tools they need, the release build, a tmpfs work directory removed on
# exit, and volumes served over it. A script sources it first
# (`. "$(dirname "$0")/lib.sh"`), sets its defaults, calls `bench_options
# "$@"`, checks its own options, then `bench_setup NAME` (or `bench_build
# NAME`).

# die MESSAGE: the script's name and MESSAGE on stderr; exit 1.
die() {
    echo "${0##*/}: $*" >&2
    exit 1
}

# bench_usage: the script's header comment (its usage), from line 2 to the
# first line that is not a comment.
bench_usage() {
    awk 'NR > 1 && !/^#/ {exit} NR > 1' "$0" | sed 's/^# \{0,1\}//'
}

# bench_options ARG...: the command line. The options the benchmarks share
# are taken where the script has set their variable (its default) first:
# --runs N (RUNS), --runtime SECS (RUNTIME), --latency T (LATENCY), --out
# DIR (OUT), --platter BIN (PLATTER), --dir DIR (MEMBER_DIR). Any other
# option goes to the script's `bench_option OPTION [WORD...]` if it has
# one, which sets its variable from $2, sets TAKES if the option is not
# followed by one value (a flag: 1), and returns 1 for an option it does
# not take. -h and --help print the usage and exit 0; an unknown option
# is named, with the usage, on stderr (exit 2), as is an option missing
# its value. RUNS and RUNTIME must be whole numbers above 0, LATENCY a
# time with a unit (or none, in the scripts where that is the default).
bench_options() {
    local var latency_default=${LATENCY-}
    while [ $# -gt 0 ]; do
        case "$1" in -h | --help) bench_usage; exit 0 ;; esac
        TAKES=2
        if var=$(bench_shared_var "$1"); then
            printf -v "$var" '%s' "${2-}"
        elif ! bench_own_option "$@"; then
            bench_usage_error "unknown argument: $1"
        fi
        [ $# -ge "$TAKES" ] || bench_usage_error "$1 wants a value"
        shift "$TAKES"
    done
    [ -z "${RUNS+set}" ] || bench_positive "$RUNS" "--runs wants a positive integer"
    [ -z "${RUNTIME+set}" ] || bench_positive "$RUNTIME" "--runtime wants a positive number of seconds"
    [ -z "${LATENCY+set}" ] || bench_latency "$latency_default"
}

# bench_shared_var OPTION: prints the variable of a shared option the
# script takes; fails for any other.
bench_shared_var() {
    local var
    case "$1" in
        --runs) var=RUNS ;;
        --runtime) var=RUNTIME ;;
        --latency) var=LATENCY ;;
        --out) var=OUT ;;
        --platter) var=PLATTER ;;
        --dir) var=MEMBER_DIR ;;
        *) return 1 ;;
    esac
    [ -n "${!var+set}" ] && echo "$var"
}

# bench_own_option ARG...: the script's `bench_option`, if it has one, on
# the rest of the command line; a missing value reads as empty (the caller
# then refuses it).
bench_own_option() {
    declare -F bench_option >/dev/null || return 1
    local rc=0
    set +u
    bench_option "$@" || rc=$?
    set -u
    return "$rc"
}

bench_usage_error() {
    echo "${0##*/}: $*" >&2
    bench_usage >&2
    exit 2
}

# bench_positive VALUE MESSAGE: dies with MESSAGE unless VALUE is a whole
# number above 0.
bench_positive() {
    case "$1" in '' | *[!0-9]* | 0) die "$2" ;; esac
}

# bench_latency DEFAULT: LATENCY is a time with a unit, or none where
# DEFAULT is (no latency injected).
bench_latency() {
    if [ "$1" = none ]; then
        case "$LATENCY" in none | *[0-9]us | *[0-9]ms | *[0-9]s) ;; *) die "--latency wants none or a time with a unit: 500us, 2ms" ;; esac
    else
        case "$LATENCY" in *[0-9]us | *[0-9]ms | *[0-9]s) ;; *) die "--latency wants a time with a unit: 500us, 2ms, 1s" ;; esac
    fi
}

# bench_machine [FIO_MORE]: the lines each benchmark's environment.txt
# starts with (the date, the host, its load, fio's version with FIO_MORE
# after it, and platter's); the script adds its own settings.
bench_machine() {
    echo "date:      $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "host:      $(uname -srm), $(nproc) CPUs"
    echo "load:      $(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min, at start)"
    echo "fio:       $(fio --version)${1:+; $1}"
    echo "platter:   $PLATTER, $("$PLATTER" --version)"
}

# bench_setup NAME: checks the tools, builds platter unless PLATTER is set,
# makes OUT (target/bench/NAME-<UTC time> unless set) and WORK (under
# MEMBER_DIR if the caller set it, else /dev/shm), and stops every server
# in PID and removes WORK on exit.
bench_setup() {
    local tool
    for tool in fio python3 cargo; do
        command -v "$tool" >/dev/null || die "needs $tool (Debian: apt-get install fio python3)"
    done
    fio --enghelp=nbd >/dev/null 2>&1 || die "this fio has no nbd engine (Debian's fio has it)"
    MEMBER_DIR=${MEMBER_DIR:-/dev/shm}
    [ -d "$MEMBER_DIR" ] && [ -w "$MEMBER_DIR" ] || die "needs a writable $MEMBER_DIR for the member files"

    bench_build "$1"

    WORK=$(mktemp -d -p "$MEMBER_DIR" "platter-$1.XXXXXX")
    declare -gA PID=() URI=()
    trap bench_cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
}

# bench_build NAME: sets ROOT and TARGET, makes OUT (target/bench/NAME-<UTC
# time> unless set) and builds platter unless PLATTER is set. Also used on
# its own by bench/serve.sh, which keeps its own work directory.
bench_build() {
    ROOT=$(cd "$(dirname "$0")/.." && pwd)
    TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
    [ -n "$OUT" ] || OUT="$TARGET/bench/$1-$(date -u +%Y%m%dT%H%M%SZ)"
    mkdir -p "$OUT"
    if [ -z "$PLATTER" ]; then
        echo "== building the release binary"
        (cd "$ROOT" && cargo build --release --bin platter) >&2
        PLATTER="$TARGET/release/platter"
    fi
    [ -x "$PLATTER" ] || die "no $PLATTER"
}

# wait_ready NAME: waits (30 s at most) for server NAME (PID[NAME], its
# output in OUT/NAME.out) to print its ready line; dies if it exits first.
wait_ready() {
    local name="$1"
    for _ in $(seq 300); do
        grep -q "^serving '" "$OUT/$name.out" 2>/dev/null && break
        kill -0 "${PID[$name]}" 2>/dev/null || die "$name: platter serve exited: $(tail -n 5 "$OUT/$name.log")"
        sleep 0.1
    done
}

bench_cleanup() {
    local rc=$? s
    trap - EXIT INT TERM
    for s in "${!PID[@]}"; do
        kill -TERM "${PID[$s]}" 2>/dev/null || true
        wait "${PID[$s]}" 2>/dev/null || true
    done
    rm -rf "$WORK"
    exit "$rc"
}

# serve NAME LEVEL MEMBERS INTERLEAVE INJECT|none [create options...]:
# 64 MiB members (63 MiB of data each), every member given `--inject
# MEMBER=INJECT`, served with the options in SERVE_ARGS (an array, may be
# empty); sets PID[NAME] and URI[NAME].
serve() {
    local name="$1" level="$2" n="$3" il="$4" spec="$5" i paths=() inject=()
    shift 5
    mkdir "$WORK/$name"
    for i in $(seq 0 $((n - 1))); do
        paths+=("$WORK/$name/m$i")
        [ "$spec" = none ] || inject+=(--inject "$WORK/$name/m$i=$spec")
    done
    "$PLATTER" create --level "$level" --interleave "$il" --member-size 64M \
        --name "$name" "$@" "${paths[@]}" >"$OUT/create-$name.txt"
    NO_COLOR=1 "$PLATTER" serve --socket "$WORK/$name/sock" ${SERVE_ARGS[@]+"${SERVE_ARGS[@]}"} \
        ${inject[@]+"${inject[@]}"} "${paths[@]}" >"$OUT/$name.out" 2>"$OUT/$name.log" &
    PID[$name]=$!
    await_served "$name" "$WORK/$name/sock"
}

# await_served NAME SOCKET: waits for server NAME's ready line; sets
# URI[NAME] for the export it names on SOCKET.
await_served() {
    local name="$1" export
    wait_ready "$name"
    grep -q "^serving '" "$OUT/$name.out" || die "$name: not ready in 30 s"
    export=$(sed -n "s/^serving '\([^']*\)'.*/\1/p" "$OUT/$name.out")
    URI[$name]="nbd+unix:///$export?socket=$2"
}

# serve_members NAME ARG...: `platter serve` of members that exist, with
# ARGs (options, then the members), on WORK/NAME.sock; sets PID[NAME] and
# URI[NAME].
serve_members() {
    local name="$1"
    shift
    NO_COLOR=1 "$PLATTER" serve --socket "$WORK/$name.sock" "$@" \
        >"$OUT/$name.out" 2>"$OUT/$name.log" &
    PID[$name]=$!
    await_served "$name" "$WORK/$name.sock"
}

# stop_served NAME: SIGTERM; the server must stop cleanly.
stop_served() {
    kill -TERM "${PID[$1]}"
    wait "${PID[$1]}" || die "$1: platter serve failed on stop: $(tail -n 5 "$OUT/$1.log")"
    unset "PID[$1]"
}
