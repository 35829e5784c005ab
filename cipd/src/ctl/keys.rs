//! `cipctl keygen` and `cipctl hint verify`: the node's signing key, and checking signed
//! hints offline (a peer's hint as a middle node received it, from `cipctl peer-hint`).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;

use super::{EXIT_INVALID_INPUT, fail};
use crate::model::trust::keys::{NodeKey, PublicKey};
use crate::model::trust::signature::{self, PeerTrust, Policy, Verdict};

/// Arguments of `cipctl keygen`.
#[derive(Debug, Args)]
pub struct KeygenArgs {
    /// Directory to write `node.key` (private, mode 0600) and `node.pub` into; created
    /// with mode 0700 when missing. Existing keys are never overwritten.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
}

/// Writes a new key pair and prints what to put in the configurations.
pub fn keygen(args: &KeygenArgs) -> ExitCode {
    let run = || -> anyhow::Result<()> {
        let key = NodeKey::generate()?;
        let (private, public) = key.write(&args.out)?;
        println!("private key: {} (mode 0600)", private.display());
        println!("public key:  {}", public.display());
        println!();
        println!("This node's configuration:");
        println!("  [signing]");
        println!("  key = {:?}", private.display().to_string());
        println!();
        println!("Each peer that takes this node's hints, in its [[peer]] for this node:");
        println!("  public_key = \"{}\"", key.public());
        println!("  signatures = \"require\"");
        Ok(())
    };
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e),
    }
}

/// Arguments of `cipctl hint verify`.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// The signer's public key (`ed25519:...`, or a `node.pub` file). Repeat for more.
    #[arg(long = "key", required = true, value_name = "KEY")]
    pub keys: Vec<String>,
    /// A file holding one CIP-HINT object (`-` for standard input).
    pub file: PathBuf,
}

/// Checks a hint file's signature; exit 0 when it verifies, 1 when it does not.
pub fn verify(args: &VerifyArgs) -> ExitCode {
    let keys = match args
        .keys
        .iter()
        .map(|k| {
            if k.trim_start()
                .starts_with(crate::model::trust::keys::PUBLIC_KEY_PREFIX)
            {
                PublicKey::parse(k)
            } else {
                crate::model::trust::keys::read_public(std::path::Path::new(k))
            }
        })
        .collect::<Result<Vec<_>, _>>()
    {
        Ok(k) => k,
        Err(e) => return fail(&e.into()),
    };
    let input = if args.file.as_os_str() == "-" {
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut buf).map(|_| buf)
    } else {
        std::fs::read(&args.file)
    };
    let hint = match input
        .with_context(|| format!("cannot read {}", args.file.display()))
        .and_then(|bytes| {
            crate::pipeline::index_types::parse_hint(
                &bytes.into(),
                cip_proto::soif::Limits::default(),
            )
            .map_err(anyhow::Error::from)
        }) {
        Ok(h) => h,
        Err(e) => return fail(&e),
    };
    let trust = PeerTrust {
        keys,
        policy: Policy::Require,
    };
    let now = std::time::SystemTime::now();
    // Offline there is no last date and no clock to compare with.
    match signature::check(&hint, &trust, None, now, std::time::Duration::MAX) {
        Ok(Verdict::Valid { key, .. }) => {
            println!(
                "{}: signature valid (key {key}, Date {})",
                args.file.display(),
                hint.date.as_deref().unwrap_or("-")
            );
            ExitCode::SUCCESS
        }
        Ok(other) => {
            println!("{}: {}", args.file.display(), other.describe());
            ExitCode::from(EXIT_INVALID_INPUT)
        }
        Err(e) => {
            println!(
                "{}: refused ({} {}): {e}",
                args.file.display(),
                e.code().code(),
                e.code().text()
            );
            ExitCode::from(EXIT_INVALID_INPUT)
        }
    }
}
