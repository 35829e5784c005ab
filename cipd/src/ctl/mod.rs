//! `cipctl` subcommands. Each module holds one command group's clap arguments and its `run`.
//!
//! Offline tools (no daemon needed): [`soif`], [`hina`], [`hint`]. Commands for a running daemon: [`admin`]. Talking to other servers: [`query`], [`search`], [`rdm`]. Packaging: [`generate`].

pub mod admin;
pub mod generate;
pub mod hina;
pub mod hint;
pub mod keys;
pub mod query;
pub mod rdm;
pub mod search;
pub mod soif;
pub mod tls;

use std::process::ExitCode;

/// Exit status for "ran fine, found problems in the input" (as `grep` and `diff` use 1).
pub const EXIT_INVALID_INPUT: u8 = 1;
/// Exit status for usage or environment errors (missing files, unreachable daemon).
pub const EXIT_FAILURE: u8 = 2;

/// Prints an error chain the way every subcommand does and returns [`EXIT_FAILURE`].
pub fn fail(err: &anyhow::Error) -> ExitCode {
    eprintln!("cipctl: {err:#}");
    ExitCode::from(EXIT_FAILURE)
}
