//! `cipd-sim-proxy`: the fault-injecting proxy in front of one node of a real mesh run
//! (`cipd-sim --real`); see `cipd_sim::real::proxy`. Started by the run inside the
//! node's network namespace and steered over its standard input.

// Outside tests, a failure is an error or a justified `expect`: never a bare unwrap.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use cipd_sim::real::proxy::{ProxyConfig, run};
use clap::Parser;

/// Forwards connections to a node's daemon from the client's own address, with latency and
/// loss, held at a start gate, cut or slowed on command.
#[derive(Debug, Parser)]
#[command(name = "cipd-sim-proxy", version)]
struct Args {
    /// Where clients connect.
    #[arg(long)]
    listen: SocketAddr,
    /// The daemon.
    #[arg(long)]
    target: SocketAddr,
    /// One-way latency, least, in microseconds.
    #[arg(long, default_value_t = 1000)]
    min_latency_us: u64,
    /// One-way latency, most, in microseconds.
    #[arg(long, default_value_t = 5000)]
    max_latency_us: u64,
    /// Chance that a chunk is lost (and delivered --rto-ms late).
    #[arg(long, default_value_t = 0.0)]
    loss: f64,
    /// Retransmission timeout of a lost chunk, in milliseconds.
    #[arg(long, default_value_t = 200)]
    rto_ms: u64,
    /// Seed of the latency and loss draws.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

fn main() -> ExitCode {
    let a = Args::parse();
    let config = ProxyConfig {
        listen: a.listen,
        target: a.target,
        latency: (
            Duration::from_micros(a.min_latency_us),
            Duration::from_micros(a.max_latency_us.max(a.min_latency_us)),
        ),
        loss: a.loss.clamp(0.0, 1.0),
        rto: Duration::from_millis(a.rto_ms),
        seed: a.seed,
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cipd-sim-proxy: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cipd-sim-proxy: {}: {e}", a.listen);
            ExitCode::FAILURE
        }
    }
}
