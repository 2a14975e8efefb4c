# Conformance checks of `platter serve`'s handshake and multi-connection
# promises with libnbd (option mode, export listing, unknown exports, meta
# contexts, block status, an oversized write, CAN_MULTI_CONN). Run by
# nbdsh like errors.py:
#
#   nbdsh -c "URI='nbd+unix:///v?socket=S'; NAME='v'; READ_ONLY=False" -c "exec(open('handshake.py').read())"
#
# Prints one line per check and "handshake: N checks passed"; raises at
# the first failure.
checks = 0


def ok(what):
    global checks
    checks += 1
    print("ok  " + what)


# Option mode: list exports, ask about ours and one that does not exist.
h = nbd.NBD()
h.set_opt_mode(True)
h.set_full_info(True)
h.connect_uri(URI)
names = []
h.opt_list(lambda name, description: names.append(name))
assert NAME in names, names
ok("NBD_OPT_LIST names the volume: %s" % names)
h.set_export_name("no-such-export")
try:
    h.opt_info()
    raise AssertionError("NBD_OPT_INFO on an unknown export succeeded")
except nbd.Error as e:
    ok("NBD_OPT_INFO on an unknown export refused (%s)" % e.string)
h.set_export_name(NAME)
h.opt_info()
size = h.get_size()
assert size > 0
ok("NBD_OPT_INFO on the volume: %d bytes, description %r"
   % (size, h.get_export_description()))
contexts = []
h.opt_list_meta_context(lambda name: contexts.append(name))
assert "base:allocation" in contexts, contexts
ok("meta contexts offered: %s" % contexts)
h.add_meta_context("base:allocation")
h.opt_go()
assert h.can_meta_context("base:allocation")
ok("NBD_OPT_GO after INFO; base:allocation negotiated")
seen = []


def extent(metacontext, offset, entries, err):
    seen.append((metacontext, offset, list(entries)))


h.block_status(65536, 0, extent)
assert seen and seen[0][0] == "base:allocation", seen
lengths = seen[0][2][0::2]
assert 0 < sum(lengths) and seen[0][1] == 0, seen
ok("NBD_CMD_BLOCK_STATUS answers for base:allocation: %s" % seen[0][2][:4])
h.shutdown()

if not READ_ONLY:
    # CAN_MULTI_CONN: a write completed on one connection and a flush on a
    # second are seen by a read on a third.
    a, b, c = nbd.NBD(), nbd.NBD(), nbd.NBD()
    for x in (a, b, c):
        x.connect_uri(URI)
    assert a.can_multi_conn()
    a.pwrite(b"\x5a" * 4096, 8192)
    b.flush()
    assert c.pread(4096, 8192) == b"\x5a" * 4096
    ok("multi-conn: write on one, flush on another, read on a third")
    # A write larger than the server takes: it may close this connection
    # (NBD spec), never another.
    big = nbd.NBD()
    big.set_strict_mode(0)
    big.connect_uri(URI)
    try:
        big.pwrite(b"\x00" * (64 << 20), 0)
        raise AssertionError("a 64 MiB write succeeded")
    except nbd.Error as e:
        ok("a 64 MiB write refused or its connection closed (%s)" % e.string)
    assert c.pread(4096, 8192) == b"\x5a" * 4096
    ok("other connections unaffected by the oversized write")
    for x in (a, b, c):
        x.shutdown()
print("handshake: %d checks passed" % checks)
