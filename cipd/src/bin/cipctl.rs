//! `cipctl`: the operators' tool. Offline SOIF, Hina-Di and hint tools, queries, and the admin socket.

// Outside tests, a failure is an error or a justified `expect`: never a bare unwrap.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

use std::process::ExitCode;

use cipd::ctl;
use clap::{Parser, Subcommand};

/// Operate and inspect cipd nodes, and work with SOIF and CIP-HINT files.
#[derive(Debug, Parser)]
#[command(name = "cipctl", version)]
struct Cli {
    #[command(flatten)]
    admin: ctl::admin::AdminOptions,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Check, convert and reformat SOIF files (offline).
    #[command(subcommand)]
    Soif(ctl::soif::SoifCommand),
    /// Check and convert Hina-Di (Asahina Antenna) files (offline).
    #[command(subcommand)]
    Hina(ctl::hina::HinaCommand),
    /// Build CIP-HINT objects from SOIF collections and inspect them (offline).
    #[command(subcommand)]
    Hint(ctl::hint::HintCommand),
    /// Speak RDM to any server: status, server description, schema, taxonomy, RDs.
    #[command(subcommand)]
    Rdm(ctl::rdm::RdmCommand),
    /// Ask a node for referrals (and chase them with --follow).
    Query(ctl::query::QueryArgs),
    /// Ask a node to search the whole mesh: it chases the referrals and returns the objects.
    Search(ctl::search::SearchArgs),
    /// Make the node's Ed25519 key pair for signing its hints.
    Keygen(ctl::keys::KeygenArgs),
    /// Make a mesh CA and node certificates for TLS (mutual TLS between peers).
    #[command(subcommand)]
    Tls(ctl::tls::TlsCommand),
    #[command(flatten)]
    Admin(ctl::admin::AdminCommand),
    /// Write the man page and shell completions into a directory (for packaging).
    #[command(hide = true)]
    GenerateDocs {
        /// The directory.
        #[arg(long)]
        out: std::path::PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Soif(cmd) => ctl::soif::run(cmd),
        Command::Hina(cmd) => ctl::hina::run(cmd),
        Command::Hint(cmd) => ctl::hint::run(cmd),
        Command::Rdm(cmd) => ctl::rdm::run(cmd),
        Command::Query(args) => ctl::query::run(args),
        Command::Search(args) => ctl::search::run(args),
        Command::Keygen(args) => ctl::keys::keygen(&args),
        Command::Tls(cmd) => ctl::tls::run(cmd),
        Command::Admin(cmd) => ctl::admin::run(cmd, &cli.admin),
        Command::GenerateDocs { out } => {
            use clap::CommandFactory;
            match ctl::generate::write_docs(Cli::command(), &out) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => ctl::fail(&e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        super::Cli::command().debug_assert();
    }
}
