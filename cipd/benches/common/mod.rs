//! What the bench binaries share.

use std::str::FromStr;

/// The variable `name` parsed, or `default` when unset; a value that does not parse stops
/// the run.
pub fn env_or<T: FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} does not parse")),
        _ => default,
    }
}
