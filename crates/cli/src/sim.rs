//! `platter sim`: the simulator's commands.

use crate::error::Result;
use clap::{Args, Subcommand};
use platter_sim::disksim::trace::{read_trace, validate};
use std::path::PathBuf;

#[derive(Subcommand)]
pub enum SimCommand {
    /// Replay a DiskSim validation trace against a modelled drive and print
    /// the demerit (RMS horizontal distance between the measured and the
    /// simulated response-time distributions, as DiskSim's `rms` computes
    /// it).
    #[command(
        after_help = "Example: platter sim validate --drive ../shared/data/disksim/cheetah9LP.parv \
                      --trace ../shared/data/disksim/cheetah9LP.trace\n\
                      DiskSim 4.0's own demerits: cheetah9LP 0.107, hp_c2247a 0.090, barracuda 0.349 ms."
    )]
    Validate(ValidateArgs),
}

#[derive(Args)]
pub struct ValidateArgs {
    /// DiskSim 4.0 parameter file (.parv); the files it sources are read
    /// from its folder.
    #[arg(long, value_name = "FILE.parv")]
    drive: PathBuf,
    /// DiskSim validate trace: R|W, hit/miss, block, sectors, measured
    /// service time (µs), next inter-arrival (µs).
    #[arg(long, value_name = "FILE.trace")]
    trace: PathBuf,
    /// Print the figures as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(c: SimCommand) -> Result<()> {
    match c {
        SimCommand::Validate(a) => run_validate(a),
    }
}

fn run_validate(a: ValidateArgs) -> Result<()> {
    let spec = platter_sim::disksim::load_drive(&a.drive).map_err(|e| e.to_string())?;
    let trace = read_trace(&a.trace)?;
    if trace.is_empty() {
        return Err(format!("{}: no requests", a.trace.display()).into());
    }
    let v = validate(&spec, &trace);
    if a.json {
        let j = serde_json::json!({
            "drive": spec.name,
            "requests": v.requests,
            "demerit_ms": v.demerit_ms,
            "demerit_exact_ms": v.demerit_exact_ms,
            "mean_measured_ms": v.mean_measured_ms,
            "mean_simulated_ms": v.mean_simulated_ms,
            "measured_read_hit_ratio": v.measured_read_hit_ratio,
            "simulated_read_hit_ratio": v.simulated_read_hit_ratio,
        });
        println!("{j}");
        return Ok(());
    }
    println!(
        "drive     {} ({} blocks, {} rpm)",
        spec.name, spec.layout.blocks, spec.rpm
    );
    println!("requests  {}", v.requests);
    println!("demerit   {:.3} ms (rms, DiskSim buckets)", v.demerit_ms);
    println!("          {:.3} ms (exact quantiles)", v.demerit_exact_ms);
    println!(
        "mean      {:.3} ms measured, {:.3} ms simulated",
        v.mean_measured_ms, v.mean_simulated_ms
    );
    match v.measured_read_hit_ratio {
        Some(m) => println!(
            "read hits {:.1}% measured, {:.1}% simulated",
            100.0 * m,
            100.0 * v.simulated_read_hit_ratio
        ),
        None => println!(
            "read hits {:.1}% simulated (the trace does not tell hits from misses)",
            100.0 * v.simulated_read_hit_ratio
        ),
    }
    Ok(())
}
