//! `cipd`: the CIP referral-mesh daemon.
//!
//! `cipd --config FILE` runs a node; `cipd check-config FILE` validates a configuration and
//! exits 64 when it is bad; `cipd` alone serves the built-in sample node on loopback.

// Outside tests, a failure is an error or a justified `expect`: never a bare unwrap.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use cipd::daemon::{Daemon, StartError, StartOptions};
use cipd::front::admin::default_socket_path;
use cipd::model::config::{Config, ConfigError, read_config};
use clap::{Parser, Subcommand};

/// The daemon allocates and frees big buffers on many threads (hints parsed on the blocking
/// pool, imported on the import thread, aggregated by the out-bound builder). glibc's
/// per-thread arenas kept what they had freed: a hub holding 83 MB of routing table
/// measured 400-460 MiB RSS with them (295 MiB with one arena; mimalloc: 457 MiB).
/// jemalloc, purging from a background thread (`.cargo/config.toml`), gave 116 MiB; the
/// README's sizing section has the figures.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Exit status for a bad configuration (64, `EX_USAGE` in sysexits.h); the systemd unit does
/// not restart on it.
const EXIT_BAD_CONFIG: u8 = 64;

/// The sample node's DSI: an example OID under a private-enterprise arc reserved for
/// documentation (1.3.6.1.4.1.99999 is not assigned to anyone).
const SAMPLE_DSI: &str = "1.3.6.1.4.1.99999.1";
const SAMPLE_CIP: &str = "127.0.0.1:7070";
const SAMPLE_HTTP: &str = "127.0.0.1:7080";

/// The CIP referral-mesh daemon.
#[derive(Debug, Parser)]
#[command(name = "cipd", version)]
struct Cli {
    /// Configuration file (TOML). Without one, cipd serves a sample node on loopback.
    #[arg(long, short, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Validate a configuration file and explain every problem (exit 64 when bad).
    CheckConfig {
        /// The file.
        file: PathBuf,
    },
    /// Write the man page and shell completions into a directory (for packaging).
    #[command(hide = true)]
    GenerateDocs {
        /// The directory.
        #[arg(long)]
        out: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::CheckConfig { file }) => check_config(&file),
        Some(Command::GenerateDocs { out }) => {
            use clap::CommandFactory;
            match cipd::ctl::generate::write_docs(Cli::command(), &out) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("cipd: {e:#}");
                    ExitCode::from(2)
                }
            }
        }
        None => run(cli.config),
    }
}

fn check_config(file: &Path) -> ExitCode {
    let config = match read_config(file) {
        Ok(c) => c,
        Err(e) => return report_config_error(file, &e),
    };
    let env = config.check_environment();
    if !env.is_empty() {
        eprintln!(
            "{}: {} problem{} on this host",
            file.display(),
            env.len(),
            if env.len() == 1 { "" } else { "s" }
        );
        for p in &env {
            eprintln!("  {p}");
        }
        return ExitCode::from(EXIT_BAD_CONFIG);
    }
    println!(
        "{}: ok (node {}, {} CIP listener(s), {} HTTP listener(s), {} collection(s), {} peer(s))",
        file.display(),
        config.node.dsi,
        config.listen.cip.len() + config.listen.cip_tls.len(),
        config.listen.http.len() + config.listen.https.len(),
        config.collections.len(),
        config.peers.len()
    );
    let t = &config.limits.table;
    let mib = |b: u64| b / (1 << 20);
    println!(
        "routing table budgets: {} MiB in all, {} MiB per peer ({})",
        mib(t.max_table_bytes),
        mib(t.max_peer_bytes),
        cipd::sys::memory::available().map_or_else(
            || "memory this process may use: unknown".to_owned(),
            |m| format!("memory this process may use: {} MiB", mib(m))
        )
    );
    ExitCode::SUCCESS
}

fn report_config_error(file: &Path, e: &ConfigError) -> ExitCode {
    match e {
        ConfigError::Invalid { .. } => eprintln!("{}: {e}", file.display()),
        _ => eprintln!("cipd: {e}"),
    }
    ExitCode::from(EXIT_BAD_CONFIG)
}

fn run(path: Option<PathBuf>) -> ExitCode {
    let (config, sample) = match &path {
        Some(p) => match read_config(p) {
            Ok(c) => (c, false),
            Err(e) => return report_config_error(p, &e),
        },
        None => match sample_config(SAMPLE_CIP, SAMPLE_HTTP, Some(&default_socket_path())) {
            Ok(c) => (c, true),
            Err(e) => {
                eprintln!("cipd: {e:#}");
                return ExitCode::FAILURE;
            }
        },
    };
    let log = match cipd::sys::telemetry::init(config.log_format, &config.log_level) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("cipd: {e}");
            return ExitCode::from(EXIT_BAD_CONFIG);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("cipd: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let options = StartOptions {
        config_path: path,
        log: Some(log),
        network: None,
    };
    match runtime.block_on(serve(config, options, sample)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("cipd: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(config: Config, options: StartOptions, sample: bool) -> anyhow::Result<bool> {
    let signals = cipd::daemon::Signals::register().context("cannot install signal handlers")?;
    let daemon = match Daemon::start_with(config.clone(), options.clone()).await {
        Ok(d) => d,
        // The sample node prefers its fixed ports and the default admin socket, but takes
        // free ports (and no admin socket) when another node holds them.
        Err(StartError::Bind { addr, source }) if sample => {
            eprintln!("cipd: {addr} is busy ({source}); using free ports instead");
            let config = sample_config("127.0.0.1:0", "127.0.0.1:0", None)?;
            Daemon::start_with(config, options)
                .await
                .context("cannot start the sample node")?
        }
        Err(StartError::Admin(e)) if sample => {
            eprintln!("cipd: {e}; starting without an admin socket");
            let config = sample_config(SAMPLE_CIP, SAMPLE_HTTP, None)?;
            Daemon::start_with(config, options)
                .await
                .context("cannot start the sample node")?
        }
        Err(e) => return Err(e).context("cannot start"),
    };
    signals.handle(daemon.node());
    if sample {
        // A banner for the person at the terminal: a closed stdout (a reader that went away)
        // must not take the node down, so write errors are ignored.
        use std::io::Write as _;
        let l = daemon.listeners();
        let mut banner = format!(
            "cipd: no configuration given; serving the built-in sample node (DSI {SAMPLE_DSI})\n"
        );
        for a in &l.cip {
            banner.push_str(&format!("listening for CIP on {a}\n"));
        }
        for a in &l.http {
            banner.push_str(&format!("listening for queries on http://{a}\n"));
        }
        if let Some(p) = &l.admin {
            banner.push_str(&format!(
                "listening for admin commands on {}\n",
                p.display()
            ));
        }
        if let Some(a) = l.http.first() {
            banner.push_str(&format!(
                "try: cipctl query --server http://{a} '{}'\n",
                cipd::store::sample::SAMPLE_QUERY
            ));
        }
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(banner.as_bytes()).and_then(|()| out.flush());
    }
    Ok(daemon.run_until_stopped().await)
}

/// The built-in sample node: loopback listeners, the bundled collection, a spool in the
/// user's state directory (or the temporary directory).
fn sample_config(cip: &str, http: &str, admin: Option<&Path>) -> anyhow::Result<Config> {
    let data_dir = sample_data_dir();
    let admin = admin
        .map(|p| format!("admin_socket = {:?}\n", p.display().to_string()))
        .unwrap_or_default();
    let text = format!(
        r#"
data_dir = {data_dir:?}
[node]
dsi = "{SAMPLE_DSI}"
description = "cipd sample node"
[listen]
cip = ["{cip}"]
http = ["{http}"]
{admin}[[collection]]
name = "sample"
type = "sample"
[log]
format = "text"
level = "info"
"#,
        data_dir = data_dir.display().to_string()
    );
    Config::from_toml(&text).context("built-in sample configuration")
}

fn sample_data_dir() -> PathBuf {
    let state = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")));
    match state {
        Some(s) => s.join("cipd/sample"),
        None => std::env::temp_dir().join("cipd-sample"),
    }
}
