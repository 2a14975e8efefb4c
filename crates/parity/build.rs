//! Decides whether `platter-parity` uses Intel's ISA-L.
//!
//! ISA-L is used when a small program calling every ISA-L function the crate
//! uses links against `-lisal` for the target; that proves both the library
//! and the symbols are there, with no C compiler and no dependency on where
//! the headers live. `PLATTER_NO_ISAL=1` forces the pure-Rust backend.
//!
//! The result is cached by cargo: after installing or removing libisal-dev,
//! `touch crates/parity/build.rs` (or `cargo clean -p platter-parity`) to
//! probe again.

use std::env;
use std::path::PathBuf;
use std::process::Command;

const PROBE: &str = r#"
#![allow(warnings)] // RUSTFLAGS may say -D warnings; only linking matters here
use std::ffi::{c_int, c_uchar, c_void};
extern "C" {
    fn xor_gen(vects: c_int, len: c_int, array: *mut *mut c_void) -> c_int;
    fn pq_gen(vects: c_int, len: c_int, array: *mut *mut c_void) -> c_int;
    fn gf_vect_mul_init(c: c_uchar, gftbl: *mut c_uchar);
    fn gf_vect_mad(len: c_int, vec: c_int, vec_i: c_int, gftbls: *mut c_uchar,
                   src: *mut c_uchar, dest: *mut c_uchar);
    fn ec_init_tables(k: c_int, rows: c_int, a: *mut c_uchar, gftbls: *mut c_uchar);
    fn ec_encode_data(len: c_int, k: c_int, rows: c_int, gftbls: *mut c_uchar,
                      data: *mut *mut c_uchar, coding: *mut *mut c_uchar);
    fn gf_mul(a: c_uchar, b: c_uchar) -> c_uchar;
    fn gf_inv(a: c_uchar) -> c_uchar;
}
fn main() {
    let symbols: [*const (); 8] = [
        xor_gen as *const (), pq_gen as *const (), gf_vect_mul_init as *const (),
        gf_vect_mad as *const (), ec_init_tables as *const (), ec_encode_data as *const (),
        gf_mul as *const (), gf_inv as *const (),
    ];
    std::hint::black_box(symbols);
}
"#;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(has_isal)");
    println!("cargo::rerun-if-env-changed=PLATTER_NO_ISAL");
    println!("cargo::rerun-if-changed=build.rs");

    if env::var_os("PLATTER_NO_ISAL").is_some_and(|v| v == "1") {
        return;
    }
    match probe() {
        Ok(()) => {
            println!("cargo::rustc-link-lib=isal");
            println!("cargo::rustc-cfg=has_isal");
        }
        Err(why) => println!(
            "cargo::warning=platter-parity: ISA-L not usable ({why}); \
             using the pure-Rust reference backend"
        ),
    }
}

/// Compiles and links [`PROBE`] with the same compiler, target, linker and
/// flags cargo uses for the crate itself.
fn probe() -> Result<(), String> {
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").ok_or("OUT_DIR unset")?);
    let source = out_dir.join("isal_probe.rs");
    std::fs::write(&source, PROBE).map_err(|e| format!("writing the probe: {e}"))?;

    let rustc = env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let mut cmd = Command::new(rustc);
    cmd.args([
        "--edition=2021",
        "--crate-type=bin",
        "--crate-name=isal_probe",
    ])
    .arg("-o")
    .arg(out_dir.join("isal_probe"))
    .arg(&source)
    .args(["-l", "isal"]);
    if let Ok(target) = env::var("TARGET") {
        cmd.args(["--target", &target]);
    }
    if let Some(linker) = env::var_os("RUSTC_LINKER") {
        cmd.arg("-C").arg({
            let mut arg = std::ffi::OsString::from("linker=");
            arg.push(linker);
            arg
        });
    }
    if let Ok(flags) = env::var("CARGO_ENCODED_RUSTFLAGS") {
        cmd.args(flags.split('\x1f').filter(|f| !f.is_empty()));
    }
    let output = cmd.output().map_err(|e| format!("running rustc: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let first = stderr
            .lines()
            .find(|l| l.starts_with("error"))
            .unwrap_or("no error message");
        Err(format!("linking -lisal failed: {first}"))
    }
}
