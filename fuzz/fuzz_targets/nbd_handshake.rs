//! Any client bytes through the NBD handshake (`platter_nbd::ServerHandshake`):
//! it must never panic, its output must stay bounded, and feeding the bytes in
//! uneven chunks must give exactly the same output, state and consumed count
//! as feeding them whole.
//!
//! The first two input bytes choose the limits and the chunking; the rest is
//! what the client sends after the greeting.

#![no_main]

use libfuzzer_sys::fuzz_target;
use platter_nbd::consts::*;
use platter_nbd::{ExportInfo, HandshakeConfig, HandshakeState, ServerHandshake, TlsPolicy};

fn config(max_options: u32, max_option_bytes: u32, tls: TlsPolicy) -> HandshakeConfig {
    let export =
        |name: &str, description: &str, size_bytes: u64, transmission_flags: u16| ExportInfo {
            name: name.to_string(),
            description: description.to_string(),
            size_bytes,
            transmission_flags,
            block_min_bytes: 512,
            block_preferred_bytes: 4096,
            block_max_bytes: 32 << 20,
        };
    HandshakeConfig {
        exports: vec![
            export(
                "vol0",
                "first volume",
                1 << 30,
                NBD_FLAG_HAS_FLAGS
                    | NBD_FLAG_SEND_FLUSH
                    | NBD_FLAG_SEND_FUA
                    | NBD_FLAG_SEND_TRIM
                    | NBD_FLAG_SEND_WRITE_ZEROES
                    | NBD_FLAG_SEND_FAST_ZERO
                    | NBD_FLAG_SEND_DF,
            ),
            export("vol1", "", 4096, NBD_FLAG_HAS_FLAGS | NBD_FLAG_READ_ONLY),
        ],
        max_options,
        max_option_bytes,
        tls,
    }
}

/// Output, final state and bytes consumed, feeding chunks of `next()` bytes.
fn run(
    cfg: HandshakeConfig,
    input: &[u8],
    mut next: impl FnMut() -> usize,
) -> (Vec<u8>, HandshakeState, usize) {
    let mut hs = ServerHandshake::new(cfg);
    let mut out = hs.take_output();
    let (mut pos, mut consumed) = (0, 0);
    while pos < input.len() {
        match hs.state() {
            HandshakeState::Negotiating => {}
            // The rest of the input stands for what TLS decrypts.
            HandshakeState::StartTls => {
                hs.tls_started();
                continue;
            }
            _ => break,
        }
        let end = pos.saturating_add(next().max(1)).min(input.len());
        let used = hs.feed(&input[pos..end]);
        assert!(used <= end - pos);
        match hs.state() {
            HandshakeState::Negotiating => {
                assert_eq!(used, end - pos);
                assert!(hs.wanted_bytes() >= 1);
            }
            _ => assert_eq!(hs.wanted_bytes(), 0),
        }
        consumed += used;
        out.extend(hs.take_output());
        pos += used;
    }
    (out, hs.state().clone(), consumed)
}

fuzz_target!(|data: &[u8]| {
    let (params, input) = match data {
        [a, b, rest @ ..] => ([*a, *b], rest),
        _ => ([0, 0], data),
    };
    // Bits 0-6: the option limit, 0 meaning the default of 64.
    let max_options = match u32::from(params[0] & 0x7f) {
        0 => 64,
        n => n,
    };
    let max_option_bytes = if params[0] & 0x80 != 0 { 64 } else { 64 * 1024 };
    // Every TLS policy (`serve --tls`): the same options meet each.
    let tls = match params[1] % 3 {
        0 => TlsPolicy::Off,
        1 => TlsPolicy::On,
        _ => TlsPolicy::Require,
    };
    let cfg = config(max_options, max_option_bytes, tls);

    let whole = run(cfg.clone(), input, || usize::MAX);
    // A small xorshift drives chunk sizes of 1..=64 bytes.
    let mut x = u32::from(params[1]) | 0x100;
    let chunked = run(cfg, input, || {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        (x % 64) as usize + 1
    });
    assert_eq!(whole, chunked);

    let (out, state, consumed) = whole;
    assert!(out.len() < 1 << 20, "{} bytes of output", out.len());
    if state == HandshakeState::Negotiating {
        assert_eq!(consumed, input.len());
    }
    if let HandshakeState::Transmission(n) = state {
        assert!(n.export_index < 2);
        assert!(n.meta_contexts.is_empty() || n.structured_replies);
    }
});
