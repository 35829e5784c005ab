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

/// Runs `fut` on a current-thread runtime and turns its outcome into the exit status: `ok`
/// of its value, or the error printed as [`fail`] prints it.
pub fn block_on<T>(
    fut: impl std::future::Future<Output = anyhow::Result<T>>,
    ok: impl FnOnce(T) -> ExitCode,
) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(&anyhow::Error::from(e)),
    };
    match rt.block_on(fut) {
        Ok(v) => ok(v),
        Err(e) => fail(&e),
    }
}
