//! `platter serve`: assemble a volume from its members and serve it over NBD.

use crate::error::{CliError, Result};
use crate::members::{assemble_devices, open_all};
use clap::Args;
use platter_core::units::format_size;
use platter_io::OpenOptions;
use platter_server::{serve, Ready, ServeConfig};
use std::path::PathBuf;

#[derive(Args)]
pub struct ServeArgs {
    /// Unix socket to serve on (created; a stale one is replaced).
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Also serve over TCP on HOST:PORT (only when asked: NBD has no
    /// authentication here, so bind to a trusted address).
    #[arg(long, value_name = "HOST:PORT")]
    listen: Option<String>,
    /// Refuse writes; the members are opened read-only and labels are left alone.
    #[arg(long)]
    read_only: bool,
    /// Worker threads per connection: each reads a request, runs it (member
    /// I/O blocks here) and queues the reply.
    #[arg(long, value_name = "N", default_value_t = 8)]
    threads: usize,
    /// Connections served at once; more are refused.
    #[arg(long, value_name = "N", default_value_t = 64)]
    max_connections: usize,
    /// The volume's members, in any order.
    #[arg(value_name = "MEMBER", required = true)]
    members: Vec<String>,
}

pub fn run(args: ServeArgs) -> Result<()> {
    if args.socket.is_none() && args.listen.is_none() {
        return Err(CliError(
            "give --socket PATH (or --listen HOST:PORT) to serve on".into(),
        ));
    }
    let opts = OpenOptions {
        read_only: args.read_only,
        ..OpenOptions::default()
    };
    let volume = assemble_devices(open_all(&args.members, opts)?)?;
    let config = ServeConfig {
        socket: args.socket,
        listen: args.listen,
        read_only: args.read_only,
        threads: args.threads,
        max_connections: args.max_connections,
    };
    serve(volume, config, print_ready).map_err(|e| CliError(e.to_string()))
}

fn print_ready(r: &Ready) {
    println!(
        "serving '{}' ({}, {} bytes); stop with Ctrl-C or SIGTERM",
        r.export_name,
        format_size(r.size_bytes),
        r.size_bytes
    );
    for uri in &r.uris {
        println!("  {uri}");
    }
    if let Some(uri) = r.uris.first() {
        println!("try:");
        println!("  nbdinfo '{uri}'");
        println!("  qemu-io -f raw -c 'write -P 0xab 0 1M' -c 'read -P 0xab 0 1M' '{uri}'");
        println!("  mkdir -p /tmp/platter-fuse && nbdfuse /tmp/platter-fuse/disk '{uri}' &");
    }
    // Scripts wait for this line; make sure it is out.
    use std::io::Write;
    let _ = std::io::stdout().flush();
}
