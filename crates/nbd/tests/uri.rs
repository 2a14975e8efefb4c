//! NBD URIs as NetworkBlockDevice/nbd `doc/uri.md` defines them, with
//! libnbd's `tls-certificates` and `tls-psk-file`: the spec's examples, and
//! every mistake refused with its reason.

use platter_nbd::{is_nbd_uri, parse_nbd_uri, Endpoint, NbdUri};

fn tcp(host: &str, port: u16) -> Endpoint {
    Endpoint::Tcp {
        host: host.into(),
        port,
    }
}

fn plain(endpoint: Endpoint, export: &str) -> NbdUri {
    NbdUri {
        endpoint,
        export_name: export.into(),
        tls: false,
        username: None,
        tls_certificates: None,
        tls_psk_file: None,
        tls_hostname: None,
        tls_verify_peer: true,
    }
}

#[test]
fn the_specs_examples_name_the_export_it_says() {
    for (uri, host, port, export) in [
        ("nbd://example.com", "example.com", 10809, ""),
        ("nbd://example.com/", "example.com", 10809, ""),
        ("nbd://example.com//disk", "example.com", 10809, "/disk"),
        ("nbd://example.com/disk", "example.com", 10809, "disk"),
        ("nbd://example.com:10900/disk", "example.com", 10900, "disk"),
        ("nbd://[::1]:1234/a%20b", "::1", 1234, "a b"),
        ("nbd://[fe80::1]/x", "fe80::1", 10809, "x"),
        (
            "nbd://10.0.0.2:10809/hello%20world",
            "10.0.0.2",
            10809,
            "hello world",
        ),
        ("nbd:///vol", "localhost", 10809, "vol"),
        ("NBD://h/a+b", "h", 10809, "a+b"),
    ] {
        assert_eq!(
            parse_nbd_uri(uri),
            Ok(plain(tcp(host, port), export)),
            "{uri}"
        );
    }
    assert_eq!(
        parse_nbd_uri("nbd+unix:///vol?socket=/run/a%20b.sock"),
        Ok(plain(
            Endpoint::Unix {
                socket: "/run/a b.sock".into()
            },
            "vol"
        ))
    );
    assert_eq!(
        parse_nbd_uri("nbd+unix:///?socket=%00abstract").map(|u| u.endpoint),
        Ok(Endpoint::Unix {
            socket: "\0abstract".into()
        })
    );
}

#[test]
fn tls_uris_carry_the_user_and_the_key_files() {
    let u = parse_nbd_uri(
        "nbds+unix://alice@/disk?socket=/tmp/s&tls-psk-file=/etc/keys.psk&x-future=1",
    )
    .unwrap();
    assert!(u.tls);
    assert_eq!(u.username.as_deref(), Some("alice"));
    assert_eq!(u.tls_psk_file.as_deref(), Some("/etc/keys.psk"));
    let u =
        parse_nbd_uri("nbds://h:99/d?tls-certificates=/pki&tls-hostname=other&tls-verify-peer=0")
            .unwrap();
    assert_eq!(u.endpoint, tcp("h", 99));
    assert_eq!(u.tls_certificates.as_deref(), Some("/pki"));
    assert_eq!(u.tls_hostname.as_deref(), Some("other"));
    assert!(!u.tls_verify_peer);
}

#[test]
fn mistakes_are_refused_with_their_reason() {
    for (uri, says) in [
        ("/dev/sdb", "does not start with nbd://"),
        ("http://h/x", "scheme \"http\""),
        ("nbd+vsock:///x", "scheme \"nbd+vsock\""),
        ("nbd://h:0/x", "port \"0\""),
        ("nbd://h:70000/x", "port \"70000\""),
        ("nbd://h:port/x", "port \"port\""),
        ("nbd://[::1/x", "closing ]"),
        ("nbd://::1/x", "host"),
        ("nbd://h/x#frag", "fragment"),
        ("nbd://u:secret@h/x", "password"),
        ("nbd://h/a%2", "bad percent escape"),
        ("nbd://h/a%zz", "bad percent escape"),
        ("nbd://h/a%00b", "NUL"),
        ("nbd://h/%ff", "not UTF-8"),
        ("nbd://h/x?socket=/s", "socket= is for nbd+unix"),
        ("nbd+unix:///x", "needs ?socket=PATH"),
        ("nbd+unix://h/x?socket=/s", "a host (\"h\")"),
        ("nbd://h/x?tls-psk-file=/k", "without TLS"),
        (
            "nbds://h/x?tls-psk-file=/k&tls-certificates=/c",
            "choose one",
        ),
        (
            "nbd://h/x?frobnicate=1",
            "unknown query parameter \"frobnicate\"",
        ),
        ("nbd+unix:///x?socket=/a&socket=/b", "given twice"),
        ("nbd://h/x?novalue", "has no value"),
        ("nbds://h/x?tls-verify-peer=maybe", "0 or 1"),
    ] {
        let e = parse_nbd_uri(uri).expect_err(uri);
        let m = e.to_string();
        assert!(m.contains(says), "{uri}: {m:?} does not say {says:?}");
        assert!(m.contains(uri), "{m:?} names the URI");
    }
    let long = format!("nbd://h/{}", "a".repeat(4097));
    assert!(parse_nbd_uri(&long)
        .unwrap_err()
        .to_string()
        .contains("4096"));
}

#[test]
fn uris_are_told_from_paths() {
    for s in [
        "nbd://h/x",
        "NBDS://h",
        "nbd+unix:///x?socket=/s",
        "nbds+unix://",
    ] {
        assert!(is_nbd_uri(s), "{s}");
    }
    for s in ["/dev/nbd0", "nbd0.img", "./nbd:x", "members/nbd"] {
        assert!(!is_nbd_uri(s), "{s}");
    }
}
