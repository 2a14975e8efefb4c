# Conformance checks of `platter serve` with libnbd, modelled on libnbd's
# tests/errors-* (client- and server-side unaligned, oversized,
# past-the-end, zero-size and unknown-flag requests). Run by nbdsh, which
# provides `nbd`:
#
#   nbdsh -c "URI='nbd+unix:///v?socket=S'; READ_ONLY=False" -c "exec(open('errors.py').read())"
#
# Strict mode (libnbd's default) must refuse bad requests itself, from
# what the server advertised (block sizes, flags, size), with nothing on
# the wire; with strict mode off they reach the server, which must answer
# each with the error the NBD spec names and keep the connection usable.
# Prints one line per check and "conformance: N checks passed"; raises
# (nbdsh exits non-zero) at the first failure.
import errno

checks = 0


def ok(what):
    global checks
    checks += 1
    print("ok  " + what)


def fails_with(what, fn, want):
    """fn() must raise nbd.Error with errno among `want`."""
    try:
        fn()
    except nbd.Error as e:
        # libnbd gives the errno's name ("EINVAL"); older ones a number.
        got = errno.errorcode.get(e.errno, e.errno)
        if got not in want:
            raise AssertionError("%s: errno %s (%s), want one of %s"
                                 % (what, got, e.string, sorted(want)))
        ok("%s -> %s" % (what, got))
        return
    raise AssertionError("%s: succeeded, want an error" % what)


def still_usable(h, what):
    """The connection serves a normal read after the error."""
    buf = h.pread(512, 0)
    assert len(buf) == 512, what
    ok("%s: connection still usable" % what)


def connect(strict):
    h = nbd.NBD()
    if not strict:
        h.set_strict_mode(0)
    h.connect_uri(URI)
    return h


EINVAL = {"EINVAL"}
# libnbd's client-side refusals: EINVAL, or ERANGE for a count beyond the
# advertised maximum.
CLIENT = {"EINVAL", "ERANGE"}

# --- strict mode: libnbd refuses from what the server advertised ---
h = connect(True)
size = h.get_size()
minimum = h.get_block_size(nbd.SIZE_MINIMUM)
preferred = h.get_block_size(nbd.SIZE_PREFERRED)
maximum = h.get_block_size(nbd.SIZE_MAXIMUM)
assert minimum >= 512 and minimum & (minimum - 1) == 0, minimum
assert preferred >= minimum and preferred & (preferred - 1) == 0, preferred
assert maximum >= preferred, (maximum, preferred)
ok("block sizes advertised: minimum %d, preferred %d, maximum %d"
   % (minimum, preferred, maximum))
assert h.can_flush() and h.can_fua(), "flush and FUA advertised"
assert h.can_multi_conn(), "multi-conn advertised"
ok("flush, FUA and multi-conn advertised")
fails_with("strict: unaligned read", lambda: h.pread(512, 1), CLIENT)
fails_with("strict: read past the end", lambda: h.pread(512, size), CLIENT)
fails_with("strict: read over the maximum", lambda: h.pread(maximum * 2, 0), CLIENT)
fails_with("strict: zero-length read", lambda: h.pread(0, 0), CLIENT)
fails_with("strict: unknown read flag",
           lambda: h.pread(512, 0, flags=1 << 9), CLIENT)
still_usable(h, "strict")
h.shutdown()

# --- strict mode off: the server answers ---
h = connect(False)
fails_with("server: read past the end", lambda: h.pread(512, size), EINVAL)
fails_with("server: read straddling the end",
           lambda: h.pread(1024, size - 512), EINVAL)
fails_with("server: zero-length read", lambda: h.pread(0, 0), EINVAL)
fails_with("server: unknown read flag",
           lambda: h.pread(512, 0, flags=1 << 9), EINVAL)
fails_with("server: read over 32 MiB", lambda: h.pread(33 << 20, 0), EINVAL)
still_usable(h, "server, reads")
if READ_ONLY:
    fails_with("server: write to a read-only export",
               lambda: h.pwrite(b"x" * 512, 0), {"EPERM"})
    fails_with("server: trim of a read-only export",
               lambda: h.trim(512, 0), {"EPERM"})
else:
    fails_with("server: write past the end",
               lambda: h.pwrite(b"x" * 512, size), {"ENOSPC", "EINVAL"})
    fails_with("server: zero-length write",
               lambda: h.pwrite(b"", 0), EINVAL)
    fails_with("server: unknown write flag",
               lambda: h.pwrite(b"x" * 512, 0, flags=1 << 9), EINVAL)
    fails_with("server: trim past the end", lambda: h.trim(512, size), EINVAL)
    fails_with("server: write-zeroes past the end",
               lambda: h.zero(512, size), {"ENOSPC", "EINVAL"})
    # Unaligned requests are the server's choice to serve or refuse
    # (EINVAL); platter serves them: the bytes must be exactly right.
    before = h.pread(4096, 0)
    h.pwrite(b"\xa5" * 100, 7)
    after = h.pread(4096, 0)
    assert after == before[:7] + b"\xa5" * 100 + before[107:], "unaligned write"
    assert h.pread(100, 7) == b"\xa5" * 100, "unaligned read"
    ok("server: an unaligned write and read are served byte-exact")
    still_usable(h, "server, writes")
# DF without structured replies is a flag the server did not offer.
h.shutdown()
h = nbd.NBD()
h.set_strict_mode(0)
h.set_request_structured_replies(False)
h.connect_uri(URI)
assert not h.can_df()
fails_with("server: DF without structured replies",
           lambda: h.pread(512, 0, flags=nbd.CMD_FLAG_DF), EINVAL)
still_usable(h, "server, DF")
h.shutdown()
print("conformance: %d checks passed" % checks)
