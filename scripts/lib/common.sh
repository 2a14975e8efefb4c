# Shared by scripts/setup and scripts/test: install Debian packages that are
# missing, and make sure a Rust toolchain is there.

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# need_packages PKG...: installs those not yet installed (one apt-get run).
need_packages() {
    local missing=()
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        echo "platter: installing ${missing[*]}"
        as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
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
