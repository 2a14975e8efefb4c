# Shared by scripts/setup and scripts/test: install Debian packages that are
# missing, and make sure a Rust toolchain is there.

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# How long apt-get waits for another package manager (an unattended
# upgrade at boot, another apt-get) to let go of its lock before failing.
APT_LOCK_WAIT=${APT_LOCK_WAIT:-600}

# apt_get ARG...: apt-get as root, waiting for the dpkg and package-list
# locks instead of failing at once. apt waits for the dpkg lock itself
# (DPkg::Lock::Timeout) but not for the lists lock `update` takes: that
# one is tried again every 5 s until APT_LOCK_WAIT has passed.
apt_get() {
    local deadline=$((SECONDS + APT_LOCK_WAIT)) said= err rc
    err=$(mktemp)
    while :; do
        rc=0
        as_root env DEBIAN_FRONTEND=noninteractive \
            apt-get -o "DPkg::Lock::Timeout=$APT_LOCK_WAIT" "$@" 2>"$err" || rc=$?
        if [ $rc -ne 0 ] && grep -q "Could not get lock" "$err" && [ $SECONDS -lt $deadline ]; then
            if [ -z "$said" ]; then
                echo "platter: another package manager holds the apt lock ($(grep -m1 -o 'held by process.*' "$err" || echo 'apt-get')); waiting up to ${APT_LOCK_WAIT}s" >&2
                said=1
            fi
            sleep 5
            continue
        fi
        cat "$err" >&2
        rm -f "$err"
        return $rc
    done
}

# have_package PKG: installed, or (nbdfuse) its command is there.
have_package() {
    dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "ok installed" && return 0
    # nbdfuse is a package of its own from Debian 13 on; Debian 12's
    # libnbd-bin carries it.
    [ "$1" = nbdfuse ] && command -v nbdfuse >/dev/null 2>&1
}

# need_packages PKG...: installs those not yet installed (one apt-get run).
# A package this release does not have is passed over, said in one line.
need_packages() {
    local missing=() known=() p
    for p in "$@"; do
        have_package "$p" || missing+=("$p")
    done
    [ ${#missing[@]} -gt 0 ] || return 0
    echo "platter: installing ${missing[*]} (waiting up to ${APT_LOCK_WAIT}s if another apt-get holds the lock)"
    apt_get update -q
    for p in "${missing[@]}"; do
        if apt-cache show "$p" >/dev/null 2>&1; then
            known+=("$p")
        else
            echo "platter: this release has no package $p; going on without it"
        fi
    done
    [ ${#known[@]} -eq 0 ] ||
        apt_get install -y -q "${known[@]}"
}

# in_prefix PREFIX CMD...: runs CMD, as root only when PREFIX (or the
# directory it would be made in) is not writable.
in_prefix() {
    local dir=$1
    shift
    while [ ! -e "$dir" ]; do dir=$(dirname "$dir"); done
    if [ -w "$dir" ]; then "$@"; else as_root "$@"; fi
}

# install_platter BINARY PREFIX: the binary in PREFIX/bin (where the units
# in contrib/systemd run it), every manual page in PREFIX/share/man/man1,
# bash completion where bash-completion looks under PREFIX/share, the
# example event program in PREFIX/lib/platter, DiskSim's drives in
# PREFIX/share/platter/disksim (`platter sweep --drive cheetah9LP`).
install_platter() {
    local bin=$1 prefix=$2 made
    made=$(mktemp -d)
    "$bin" man --out-dir "$made/man1" >/dev/null
    "$bin" completions bash >"$made/platter.bash"
    in_prefix "$prefix" install -D -m 755 "$bin" "$prefix/bin/platter"
    in_prefix "$prefix" install -d "$prefix/share/man/man1" "$prefix/share/platter/disksim"
    in_prefix "$prefix" install -m 644 "$made"/man1/*.1 "$prefix/share/man/man1/"
    in_prefix "$prefix" install -D -m 644 "$made/platter.bash" \
        "$prefix/share/bash-completion/completions/platter"
    in_prefix "$prefix" install -D -m 755 contrib/platter-event-mail \
        "$prefix/lib/platter/platter-event-mail"
    in_prefix "$prefix" install -m 644 data/disksim/* "$prefix/share/platter/disksim/"
    rm -r "$made"
    echo "platter: installed $prefix/bin/platter (man platter, man platter-serve ...)"
}

need_rust() {
    if ! command -v cargo >/dev/null 2>&1; then
        [ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
    fi
    if ! command -v cargo >/dev/null 2>&1; then
        need_packages cargo rustc
    fi
    local v
    v=$(rustc --version | awk '{print $2}')
    if [ "$(printf '%s\n1.87.0\n' "$v" | sort -V | head -n1)" != "1.87.0" ]; then
        echo "platter: rustc $v is older than 1.87; install a newer toolchain (rustup)" >&2
        exit 1
    fi
}

# Packages the build needs: ISA-L for parity (a pure-Rust fallback exists,
# but the tests compare the two), OpenSSL for TLS.
BUILD_PACKAGES=(pkg-config libisal-dev libssl-dev)
# NBD clients to use the demo volume with (nbdinfo, qemu-io, nbdfuse), and
# what shows platter's manual pages and completes its command lines.
CLIENT_PACKAGES=(libnbd-bin qemu-utils nbdfuse fuse3 man-db bash-completion)
# Everything the end-to-end tests drive.
TEST_PACKAGES=("${CLIENT_PACKAGES[@]}" nbdkit fio xfsprogs util-linux iproute2 openssl man-db systemd python3-libnbd chromium)
