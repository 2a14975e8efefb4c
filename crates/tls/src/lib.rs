//! TLS for platter's NBD connections, over OpenSSL (the `openssl` crate):
//! one stack that does both X.509 certificates and pre-shared keys, as
//! nbdkit, qemu and libnbd (GnuTLS) do; rustls has no TLS-PSK.
//!
//! - [`Credentials`]: certificates in nbdkit's directory layout
//!   (`ca-cert.pem`, `server-cert.pem`, `server-key.pem`; a client's
//!   `client-cert.pem`, `client-key.pem`), or a PSK file in GnuTLS
//!   `psktool`'s format (`username:hexkey` lines).
//! - [`ServerTls::accept`] and [`ClientTls::connect`]: the TLS handshake on
//!   a socket whose NBD negotiation just agreed to `NBD_OPT_STARTTLS`.
//! - The result is a plain Unix socket ([`pump`]): a thread of its own
//!   moves bytes between it and the TLS session, so that the connection's
//!   code, which reads and writes from several threads on clones of one
//!   socket, stays as it is.

mod creds;
mod pump;

pub use creds::{Credentials, PskKeys};

use openssl::ssl::{
    HandshakeError, SslAcceptor, SslConnector, SslFiletype, SslMethod, SslVerifyMode, SslVersion,
};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;
use thiserror::Error;

/// One error enum for TLS: setting it up, and a handshake that failed.
#[derive(Debug, Error)]
pub enum TlsError {
    #[error("{path}: {why}")]
    Credentials { path: PathBuf, why: String },
    #[error("TLS set-up failed: {0}")]
    Setup(#[from] openssl::error::ErrorStack),
    #[error("the TLS handshake failed: {0}")]
    Handshake(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// A socket TLS can run over: TCP or Unix.
pub trait Socket: std::io::Read + std::io::Write + AsRawFd + Send + 'static {
    fn set_nonblocking(&self, on: bool) -> std::io::Result<()>;
    fn set_timeouts(&self, t: Option<Duration>) -> std::io::Result<()>;
    fn shutdown_both(&self);
}

macro_rules! socket {
    ($t:ty) => {
        impl Socket for $t {
            fn set_nonblocking(&self, on: bool) -> std::io::Result<()> {
                <$t>::set_nonblocking(self, on)
            }
            fn set_timeouts(&self, t: Option<Duration>) -> std::io::Result<()> {
                self.set_read_timeout(t)?;
                self.set_write_timeout(t)
            }
            fn shutdown_both(&self) {
                let _ = self.shutdown(std::net::Shutdown::Both);
            }
        }
    };
}
socket!(TcpStream);
socket!(UnixStream);

/// TLS 1.2 PSK suites GnuTLS clients and servers (libnbd, nbdkit, qemu)
/// offer, (EC)DHE first.
const PSK_CIPHERS: &str = "ECDHE-PSK-AES256-CBC-SHA384:ECDHE-PSK-AES128-CBC-SHA256:\
    DHE-PSK-AES256-GCM-SHA384:DHE-PSK-AES128-GCM-SHA256:PSK-AES256-GCM-SHA384:\
    PSK-AES128-GCM-SHA256";
/// TLS 1.3 suites with SHA-256 or SHA-384, which OpenSSL's PSK callbacks
/// can use.
const TLS13_SUITES: &str = "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384";

/// The server's side: what it offers clients that ask for TLS.
pub struct ServerTls {
    acceptor: SslAcceptor,
}

impl ServerTls {
    pub fn new(creds: &Credentials) -> Result<ServerTls, TlsError> {
        let mut b = SslAcceptor::mozilla_intermediate_v5(SslMethod::tls_server())?;
        match creds {
            Credentials::X509 { dir } => {
                let file = |name: &str| dir.join(name);
                for name in ["server-cert.pem", "server-key.pem"] {
                    creds::readable(&file(name))?;
                }
                b.set_certificate_chain_file(file("server-cert.pem"))
                    .map_err(|e| creds::bad(&file("server-cert.pem"), e))?;
                b.set_private_key_file(file("server-key.pem"), SslFiletype::PEM)
                    .map_err(|e| creds::bad(&file("server-key.pem"), e))?;
                b.check_private_key()
                    .map_err(|e| creds::bad(&file("server-key.pem"), e))?;
                if file("ca-cert.pem").exists() {
                    b.set_ca_file(file("ca-cert.pem"))
                        .map_err(|e| creds::bad(&file("ca-cert.pem"), e))?;
                }
                // Clients are not asked for certificates (nbdkit's default,
                // without --tls-verify-peer).
                b.set_verify(SslVerifyMode::NONE);
            }
            Credentials::Psk(keys) => {
                // GnuTLS clients (libnbd, qemu) offer PSK in TLS 1.2 with
                // (EC)DHE; TLS 1.3 PSK through OpenSSL's callbacks works too.
                b.set_cipher_list(PSK_CIPHERS)?;
                b.set_ciphersuites(TLS13_SUITES)?;
                let keys = keys.clone();
                b.set_psk_server_callback(move |_ssl, identity, psk| {
                    let Some(key) = identity.and_then(|id| keys.key_of(id)) else {
                        tracing::info!(
                            identity = %String::from_utf8_lossy(identity.unwrap_or_default()),
                            "TLS: unknown PSK identity"
                        );
                        return Ok(0);
                    };
                    let n = key.len().min(psk.len());
                    psk[..n].copy_from_slice(&key[..n]);
                    Ok(n)
                });
                b.set_verify(SslVerifyMode::NONE);
            }
        }
        b.set_min_proto_version(Some(SslVersion::TLS1_2))?;
        Ok(ServerTls {
            acceptor: b.build(),
        })
    }

    /// Runs the server's TLS handshake on `socket` (within `timeout`) and
    /// hands the session on as a plain socket.
    pub fn accept<S: Socket>(&self, socket: S, timeout: Duration) -> Result<UnixStream, TlsError> {
        socket.set_timeouts(Some(timeout))?;
        let ssl = self.acceptor.accept(socket).map_err(handshake_error)?;
        pump::start(ssl)
    }
}

/// A member's side: how it talks TLS to its server.
pub struct ClientTls {
    connector: SslConnector,
    verify_name: bool,
}

impl ClientTls {
    /// `verify_peer`: with certificates, check the server's against the CA
    /// (`ca-cert.pem` in the directory, else the system's) and its name.
    /// No credentials: the system's CAs. With a PSK, `username` picks the
    /// key (the file's first without one).
    pub fn new(
        creds: Option<&Credentials>,
        verify_peer: bool,
        username: Option<&str>,
    ) -> Result<ClientTls, TlsError> {
        let mut b = SslConnector::builder(SslMethod::tls_client())?;
        let x509 = !matches!(creds, Some(Credentials::Psk(_)));
        match creds {
            None => b.set_verify(if verify_peer {
                SslVerifyMode::PEER
            } else {
                SslVerifyMode::NONE
            }),
            Some(Credentials::X509 { dir }) => {
                let file = |name: &str| dir.join(name);
                if file("ca-cert.pem").exists() {
                    b.set_ca_file(file("ca-cert.pem"))
                        .map_err(|e| creds::bad(&file("ca-cert.pem"), e))?;
                }
                if file("client-cert.pem").exists() {
                    b.set_certificate_chain_file(file("client-cert.pem"))
                        .map_err(|e| creds::bad(&file("client-cert.pem"), e))?;
                    b.set_private_key_file(file("client-key.pem"), SslFiletype::PEM)
                        .map_err(|e| creds::bad(&file("client-key.pem"), e))?;
                }
                b.set_verify(if verify_peer {
                    SslVerifyMode::PEER
                } else {
                    SslVerifyMode::NONE
                });
            }
            Some(Credentials::Psk(keys)) => {
                b.set_cipher_list(PSK_CIPHERS)?;
                b.set_ciphersuites(TLS13_SUITES)?;
                let (identity, key) = match username {
                    Some(u) => (
                        u.to_owned(),
                        keys.key_of(u.as_bytes())
                            .ok_or_else(|| TlsError::Credentials {
                                path: keys.path().to_owned(),
                                why: format!("no key for user {u:?}"),
                            })?
                            .to_vec(),
                    ),
                    None => keys.first().clone(),
                };
                b.set_psk_client_callback(move |_ssl, _hint, id_buf, psk| {
                    let id = identity.as_bytes();
                    if id.len() >= id_buf.len() || key.len() > psk.len() {
                        return Ok(0);
                    }
                    id_buf[..id.len()].copy_from_slice(id);
                    id_buf[id.len()] = 0;
                    psk[..key.len()].copy_from_slice(&key);
                    Ok(key.len())
                });
                b.set_verify(SslVerifyMode::NONE);
            }
        }
        b.set_min_proto_version(Some(SslVersion::TLS1_2))?;
        Ok(ClientTls {
            connector: b.build(),
            verify_name: verify_peer && x509,
        })
    }

    /// Runs the client's TLS handshake with `host` on `socket` (within
    /// `timeout`) and hands the session on as a plain socket.
    pub fn connect<S: Socket>(
        &self,
        host: &str,
        socket: S,
        timeout: Duration,
    ) -> Result<UnixStream, TlsError> {
        socket.set_timeouts(Some(timeout))?;
        let mut config = self.connector.configure()?;
        config.set_verify_hostname(self.verify_name);
        config.set_use_server_name_indication(self.verify_name);
        let ssl = config.connect(host, socket).map_err(handshake_error)?;
        pump::start(ssl)
    }
}

fn handshake_error<S>(e: HandshakeError<S>) -> TlsError {
    TlsError::Handshake(match e {
        HandshakeError::SetupFailure(s) => s.to_string(),
        HandshakeError::Failure(m) | HandshakeError::WouldBlock(m) => {
            let e = m.error();
            match (e.ssl_error(), e.io_error()) {
                (Some(s), _) => s.to_string(),
                (None, Some(io)) => io.to_string(),
                _ => e.to_string(),
            }
        }
    })
}

/// Where nbdkit looks for certificates by default, for messages.
pub fn describe(creds: &Credentials) -> String {
    match creds {
        Credentials::X509 { dir } => format!("X.509 certificates in {}", dir.display()),
        Credentials::Psk(keys) => format!("pre-shared keys from {}", keys.path().display()),
    }
}

/// Whether `dir` holds a server's certificate and key.
pub fn has_server_certificates(dir: &Path) -> bool {
    dir.join("server-cert.pem").is_file() && dir.join("server-key.pem").is_file()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn psk(dir: &Path, line: &str) -> Credentials {
        let p = dir.join(format!("{}.psk", line.len()));
        std::fs::write(&p, line).unwrap();
        Credentials::Psk(PskKeys::load(&p).unwrap())
    }

    /// A server and a client over a socket pair, each handed on as a plain
    /// socket by its pump: 4 MiB each way at once arrive whole and in
    /// order, and a close on one side ends the other's reads.
    #[test]
    fn a_psk_session_carries_bytes_both_ways_and_closes() {
        let dir = tempfile::tempdir().unwrap();
        let creds = psk(dir.path(), "alice:000102030405060708090a0b0c0d0e0f\n");
        let server = ServerTls::new(&creds).unwrap();
        let client = ClientTls::new(Some(&creds), false, None).unwrap();
        let (a, b) = UnixStream::pair().unwrap();
        let t = Duration::from_secs(10);
        let accepting = std::thread::spawn(move || server.accept(a, t).unwrap());
        let mut c = client.connect("localhost", b, t).unwrap();
        let mut s = accepting.join().unwrap();
        let data: Vec<u8> = (0..4u32 << 20).map(|i| (i * 7 + i / 4096) as u8).collect();
        let (mut c2, mut s2) = (c.try_clone().unwrap(), s.try_clone().unwrap());
        let (d1, d2) = (data.clone(), data.clone());
        let w1 = std::thread::spawn(move || c2.write_all(&d1).unwrap());
        let w2 = std::thread::spawn(move || s2.write_all(&d2).unwrap());
        let mut got = vec![0u8; data.len()];
        s.read_exact(&mut got).unwrap();
        assert!(got == data, "client to server");
        c.read_exact(&mut got).unwrap();
        assert!(got == data, "server to client");
        w1.join().unwrap();
        w2.join().unwrap();
        drop(c);
        let mut rest = Vec::new();
        s.set_read_timeout(Some(t)).unwrap();
        assert_eq!(
            s.read_to_end(&mut rest).unwrap(),
            0,
            "the close reaches the server"
        );
    }

    /// A client with another key gets a failed handshake, and so does one
    /// with an identity the server does not know; nothing reaches either
    /// side as data.
    #[test]
    fn a_wrong_psk_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let good = psk(dir.path(), "alice:000102030405060708090a0b0c0d0e0f\n");
        let t = Duration::from_secs(10);
        for wrong in [
            "alice:ff0102030405060708090a0b0c0d0e0f\n",
            "mallory:000102030405060708090a0b0c0d0e0f\n",
        ] {
            let server = ServerTls::new(&good).unwrap();
            let client = ClientTls::new(Some(&psk(dir.path(), wrong)), false, None).unwrap();
            let (a, b) = UnixStream::pair().unwrap();
            let accepting = std::thread::spawn(move || server.accept(a, t));
            let c = client.connect("localhost", b, t);
            let s = accepting.join().unwrap();
            assert!(s.is_err() || c.is_err(), "{wrong}: a session was made");
            if let Err(e) = s {
                assert!(matches!(e, TlsError::Handshake(_)), "{wrong}: {e}");
            }
        }
    }
}
