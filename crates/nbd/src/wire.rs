//! Big-endian reading and writing helpers shared by the codec.

use crate::consts::NBD_MAX_STRING;

pub(crate) fn put_u16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_be_bytes());
}

pub(crate) fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_be_bytes());
}

pub(crate) fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_be_bytes());
}

/// A cursor over untrusted bytes: every read is bounds-checked and returns
/// `None` past the end instead of panicking.
pub(crate) struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Reader { rest: bytes }
    }

    pub(crate) fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.rest.len() {
            return None;
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Some(head)
    }

    pub(crate) fn u16(&mut self) -> Option<u16> {
        self.bytes(2).map(|b| u16::from_be_bytes([b[0], b[1]]))
    }

    pub(crate) fn u32(&mut self) -> Option<u32> {
        self.bytes(4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub(crate) fn u64(&mut self) -> Option<u64> {
        self.bytes(8).map(|b| {
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            u64::from_be_bytes(a)
        })
    }

    pub(crate) fn remaining(&self) -> usize {
        self.rest.len()
    }
}

/// Why a protocol string was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BadString {
    TooLong,
    HasNul,
    NotUtf8,
}

impl BadString {
    pub(crate) fn describe(self) -> &'static str {
        match self {
            BadString::TooLong => "is longer than 4096 bytes",
            BadString::HasNul => "contains a NUL byte",
            BadString::NotUtf8 => "is not valid UTF-8",
        }
    }
}

/// Checks a string received from the client: at most [`NBD_MAX_STRING`]
/// bytes, no NUL, valid UTF-8 (proto.md, "Conventions").
pub(crate) fn protocol_str(bytes: &[u8]) -> Result<&str, BadString> {
    if bytes.len() > NBD_MAX_STRING {
        return Err(BadString::TooLong);
    }
    if bytes.contains(&0) {
        return Err(BadString::HasNul);
    }
    std::str::from_utf8(bytes).map_err(|_| BadString::NotUtf8)
}

/// The longest prefix of `s` that fits in `max` bytes without splitting a
/// character: strings the server sends must respect the protocol limit even
/// when configuration hands it something longer.
pub(crate) fn clip(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}
