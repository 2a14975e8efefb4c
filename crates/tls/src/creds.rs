//! What a TLS session proves itself with: X.509 certificates or a
//! pre-shared key.

use crate::TlsError;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A PSK file holds at most this many keys, each line at most this long.
const PSK_KEYS_MAX: usize = 10_000;
const PSK_LINE_BYTES_MAX: usize = 1024;

#[derive(Clone, Debug)]
pub enum Credentials {
    /// A directory in nbdkit's layout: `ca-cert.pem`, `server-cert.pem`,
    /// `server-key.pem` (a client's: `client-cert.pem`, `client-key.pem`).
    X509 { dir: PathBuf },
    /// Pre-shared keys.
    Psk(PskKeys),
}

/// The keys of a PSK file: `username:hexkey` per line (GnuTLS `psktool`'s
/// format, which nbdkit, qemu and libnbd read).
#[derive(Clone, Debug)]
pub struct PskKeys {
    path: PathBuf,
    keys: Arc<Vec<(String, Vec<u8>)>>,
}

impl PskKeys {
    /// Reads `path`; refuses an empty file, a malformed line (naming it),
    /// and keys that are not even-length hex.
    pub fn load(path: &Path) -> Result<PskKeys, TlsError> {
        let text = std::fs::read_to_string(path).map_err(|e| bad(path, e))?;
        let mut keys = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let at = |why: &str| TlsError::Credentials {
                path: path.to_owned(),
                why: format!("line {}: {why}", i + 1),
            };
            if line.len() > PSK_LINE_BYTES_MAX || keys.len() >= PSK_KEYS_MAX {
                return Err(at("too long, or too many keys"));
            }
            let (user, hex) = line
                .split_once(':')
                .ok_or_else(|| at("want USERNAME:HEXKEY"))?;
            if user.is_empty() {
                return Err(at("the username is empty"));
            }
            let key = unhex(hex).ok_or_else(|| at("the key is not hex digits in pairs"))?;
            if key.is_empty() || key.len() > 256 {
                return Err(at("the key must be 1 to 256 bytes"));
            }
            keys.push((user.to_owned(), key));
        }
        if keys.is_empty() {
            return Err(TlsError::Credentials {
                path: path.to_owned(),
                why: "holds no USERNAME:HEXKEY line".into(),
            });
        }
        Ok(PskKeys {
            path: path.to_owned(),
            keys: Arc::new(keys),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The key of `identity`, if the file has it.
    pub fn key_of(&self, identity: &[u8]) -> Option<&[u8]> {
        self.keys
            .iter()
            .find(|(u, _)| u.as_bytes() == identity)
            .map(|(_, k)| k.as_slice())
    }

    /// The first identity and key: what a client offers.
    pub fn first(&self) -> &(String, Vec<u8>) {
        &self.keys[0]
    }
}

fn unhex(hex: &str) -> Option<Vec<u8>> {
    let hex = hex.trim();
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect()
}

pub(crate) fn readable(path: &Path) -> Result<(), TlsError> {
    std::fs::File::open(path)
        .map(drop)
        .map_err(|e| bad(path, e))
}

pub(crate) fn bad(path: &Path, e: impl std::fmt::Display) -> TlsError {
    TlsError::Credentials {
        path: path.to_owned(),
        why: e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psk_files_are_read_and_bad_lines_named() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("keys.psk");
        std::fs::write(&p, "# keys\nalice:00ff10\n\nbob:0A0b\n").unwrap();
        let k = PskKeys::load(&p).unwrap();
        assert_eq!(k.key_of(b"alice"), Some(&[0x00, 0xff, 0x10][..]));
        assert_eq!(k.key_of(b"bob"), Some(&[0x0a, 0x0b][..]));
        assert_eq!(k.key_of(b"carol"), None);
        assert_eq!(k.first().0, "alice");
        for (text, why) in [
            ("", "holds no USERNAME:HEXKEY line"),
            ("alice\n", "line 1: want USERNAME:HEXKEY"),
            ("alice:0\n", "line 1: the key is not hex"),
            ("ok:00\nbob:zz\n", "line 2: the key is not hex"),
            (":00\n", "line 1: the username is empty"),
        ] {
            std::fs::write(&p, text).unwrap();
            let e = PskKeys::load(&p).unwrap_err().to_string();
            assert!(e.contains(why), "{text:?}: {e}");
        }
        let e = PskKeys::load(&dir.path().join("none"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("none"), "{e}");
    }
}
