//! NBD URIs (NetworkBlockDevice/nbd `doc/uri.md`): how a member on another
//! NBD server is named.
//!
//! `nbd://[user@]host[:port]/export`, `nbds://...` (TLS required),
//! `nbd+unix:///export?socket=PATH` and `nbds+unix://[user@]/export?socket=PATH`.
//! The export is the path without its leading `/`, percent-decoded; the
//! port defaults to 10809; the user is the TLS (PSK) identity. Query keys:
//! `socket` (exactly for `+unix`), and libnbd's `tls-certificates`,
//! `tls-psk-file`, plus the spec's `tls-hostname` and `tls-verify-peer`
//! (only with TLS). Keys starting `x-` are experimental and ignored; any
//! other key, a repeated key, a password, a fragment, or a bad percent
//! escape is refused: a mistyped member is named, not guessed at.

use thiserror::Error;

use crate::consts::NBD_MAX_STRING;

/// The port an NBD server listens on unless told otherwise.
pub const NBD_DEFAULT_PORT: u16 = 10809;

/// Where the server is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Endpoint {
    Tcp {
        host: String,
        port: u16,
    },
    /// A Unix socket's path (a leading NUL: Linux's abstract namespace).
    Unix {
        socket: String,
    },
}

/// A parsed NBD URI.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NbdUri {
    pub endpoint: Endpoint,
    pub export_name: String,
    /// `nbds`: TLS or nothing.
    pub tls: bool,
    /// The userinfo: the TLS username (PSK identity).
    pub username: Option<String>,
    /// `tls-certificates=DIR`: CA and client certificates, nbdkit's layout.
    pub tls_certificates: Option<String>,
    /// `tls-psk-file=FILE`: `username:hexkey` lines.
    pub tls_psk_file: Option<String>,
    /// `tls-hostname=`: the name the server's certificate must carry
    /// (default: the host).
    pub tls_hostname: Option<String>,
    /// `tls-verify-peer=0` turns off checking the server's certificate.
    pub tls_verify_peer: bool,
}

#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[error("{uri:?} is not a usable NBD URI: {why}")]
pub struct UriError {
    pub uri: String,
    pub why: String,
}

/// Whether `s` names an NBD member (by its scheme) rather than a path.
pub fn is_nbd_uri(s: &str) -> bool {
    let lower = s.to_ascii_lowercase();
    ["nbd:", "nbds:", "nbd+", "nbds+"]
        .iter()
        .any(|p| lower.starts_with(p))
}

pub fn parse_nbd_uri(uri: &str) -> Result<NbdUri, UriError> {
    parse(uri).map_err(|why| UriError {
        uri: uri.to_string(),
        why,
    })
}

fn parse(uri: &str) -> Result<NbdUri, String> {
    let (scheme, rest) = uri
        .split_once("://")
        .ok_or("it does not start with nbd://, nbds://, nbd+unix:// or nbds+unix://")?;
    let (tls, unix) = scheme_of(scheme)?;
    if rest.contains('#') {
        return Err("a fragment (#...) means nothing to NBD".into());
    }
    let (before_query, query) = match rest.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (rest, None),
    };
    let (authority, path) = match before_query.find('/') {
        Some(i) => before_query.split_at(i),
        None => (before_query, ""),
    };
    let (userinfo, hostport) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    let username = match userinfo {
        Some(u) if u.contains(':') => {
            return Err("a password in the URI: give TLS keys with tls-psk-file=".into())
        }
        Some(u) => Some(decode_str(u, "the username", false)?),
        None => None,
    };
    let export_name = decode_str(
        path.strip_prefix('/').unwrap_or(path),
        "the export name",
        false,
    )?;
    if export_name.len() > NBD_MAX_STRING {
        return Err(format!(
            "an export name of {} bytes (at most 4096)",
            export_name.len()
        ));
    }
    let mut u = NbdUri {
        endpoint: Endpoint::Unix {
            socket: String::new(),
        },
        export_name,
        tls,
        username,
        tls_certificates: None,
        tls_psk_file: None,
        tls_hostname: None,
        tls_verify_peer: true,
    };
    let socket = u.apply_query(query_params(query)?, unix)?;
    u.endpoint = endpoint(unix, hostport, socket)?;
    if u.tls_certificates.is_some() && u.tls_psk_file.is_some() {
        return Err("both tls-certificates and tls-psk-file: choose one".into());
    }
    Ok(u)
}

/// Whether the scheme asks for TLS, and for a Unix socket.
fn scheme_of(scheme: &str) -> Result<(bool, bool), String> {
    match scheme.to_ascii_lowercase().as_str() {
        "nbd" => Ok((false, false)),
        "nbds" => Ok((true, false)),
        "nbd+unix" => Ok((false, true)),
        "nbds+unix" => Ok((true, true)),
        other => Err(format!(
            "scheme {other:?}: platter speaks nbd, nbds, nbd+unix and nbds+unix"
        )),
    }
}

/// The query's `key=value` pairs, percent-decoded; a key given twice is
/// refused.
fn query_params(query: Option<&str>) -> Result<Vec<(String, String)>, String> {
    let mut params: Vec<(String, String)> = Vec::new();
    for pair in query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .filter(|p| !p.is_empty())
    {
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| format!("query parameter {pair:?} has no value"))?;
        let k = decode_str(k, "a query key", false)?;
        // A socket may start with NUL: Linux's abstract namespace.
        let v = decode_str(v, &format!("the value of {k}"), k == "socket")?;
        if params.iter().any(|(seen, _)| *seen == k) {
            return Err(format!("{k} is given twice"));
        }
        params.push((k, v));
    }
    Ok(params)
}

impl NbdUri {
    /// Takes the TLS keys from the query; returns `socket=`, which only a
    /// `+unix` URI may give.
    fn apply_query(
        &mut self,
        params: Vec<(String, String)>,
        unix: bool,
    ) -> Result<Option<String>, String> {
        let mut socket = None;
        for (k, v) in params {
            if k.starts_with("tls-") && !self.tls {
                return Err(format!("{k} without TLS: use nbds:// or nbds+unix://"));
            }
            match k.as_str() {
                "socket" if unix => socket = Some(v),
                "socket" => return Err("socket= is for nbd+unix:// and nbds+unix://".into()),
                "tls-certificates" => self.tls_certificates = Some(v),
                "tls-psk-file" => self.tls_psk_file = Some(v),
                "tls-hostname" => self.tls_hostname = Some(v),
                "tls-verify-peer" => {
                    self.tls_verify_peer = match v.as_str() {
                        "1" | "true" => true,
                        "0" | "false" => false,
                        _ => return Err(format!("tls-verify-peer={v:?}: 0 or 1")),
                    }
                }
                k if k.starts_with("x-") => {}
                k => return Err(format!("unknown query parameter {k:?}")),
            }
        }
        Ok(socket)
    }
}

/// A `+unix` URI's socket (and no host), or the host and port.
fn endpoint(unix: bool, hostport: &str, socket: Option<String>) -> Result<Endpoint, String> {
    if !unix {
        let (host, port) = split_host_port(hostport)?;
        return Ok(Endpoint::Tcp { host, port });
    }
    if !hostport.is_empty() {
        return Err(format!(
            "a host ({hostport:?}) in a Unix socket URI: write nbd+unix:///export?socket=PATH"
        ));
    }
    match socket {
        Some(s) if !s.is_empty() => Ok(Endpoint::Unix { socket: s }),
        _ => Err("a Unix socket URI needs ?socket=PATH".into()),
    }
}

/// `host[:port]`, `[v6][:port]`, or empty (localhost, as libnbd).
fn split_host_port(s: &str) -> Result<(String, u16), String> {
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (h, after) = rest
            .split_once(']')
            .ok_or("an IPv6 address without its closing ]")?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':').ok_or(format!("{after:?} after ]"))?),
        };
        (h.to_string(), port)
    } else {
        match s.rsplit_once(':') {
            Some((h, p)) => (decode_str(h, "the host", false)?, Some(p)),
            None => (decode_str(s, "the host", false)?, None),
        }
    };
    if host.contains(['/', '@', '[', ']', ' ', ':']) && !s.starts_with('[') {
        return Err(format!("host {host:?}"));
    }
    let port = match port {
        None | Some("") => NBD_DEFAULT_PORT,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 => n,
            _ => return Err(format!("port {p:?}: a number from 1 to 65535")),
        },
    };
    let host = if host.is_empty() {
        "localhost".to_string()
    } else {
        host
    };
    Ok((host, port))
}

/// Percent-decodes `s` (RFC 3986; `+` stays itself) into UTF-8 without
/// NUL, but for a leading one where `leading_nul` allows it.
fn decode_str(s: &str, what: &str, leading_nul: bool) -> Result<String, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("{what} has a bad percent escape at byte {i}"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    if out.iter().skip(1).any(|&c| c == 0) || (!leading_nul && out.first() == Some(&0)) {
        return Err(format!("{what} contains a NUL byte"));
    }
    String::from_utf8(out).map_err(|_| format!("{what} is not UTF-8"))
}
