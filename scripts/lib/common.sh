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

# need_packages PKG...: installs those not yet installed (one apt-get run).
need_packages() {
    local missing=()
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        echo "platter: installing ${missing[*]} (waiting up to ${APT_LOCK_WAIT}s if another apt-get holds the lock)"
        apt_get update -q
        apt_get install -y -q "${missing[@]}"
    fi
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
# NBD clients to use the demo volume with (nbdinfo, qemu-io, nbdfuse).
CLIENT_PACKAGES=(libnbd-bin qemu-utils nbdfuse fuse3)
# Everything the end-to-end tests drive.
TEST_PACKAGES=("${CLIENT_PACKAGES[@]}" nbdkit fio xfsprogs util-linux iproute2 openssl man-db systemd python3-libnbd chromium)
