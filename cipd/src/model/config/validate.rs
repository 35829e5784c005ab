//! The pieces every section of the configuration is checked with: the [`Validator`] that
//! collects [`Problem`]s, and [`OneOrMany`] for keys that take a string or a list.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

/// A key that takes one string or a list of strings.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    /// `key = "x"`.
    One(String),
    /// `key = ["x", "y"]`.
    Many(Vec<String>),
}

impl OneOrMany {
    pub(super) fn into_vec(self) -> Vec<String> {
        match self {
            Self::One(s) => vec![s],
            Self::Many(v) => v,
        }
    }
}

/// One problem found in a configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Key path (`peers[0].port`), empty for the document as a whole.
    pub key: String,
    /// What is wrong.
    pub message: String,
    /// 1-based line and column in the file, when known.
    pub position: Option<(usize, usize)>,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some((line, col)) = self.position {
            write!(f, "line {line}, column {col}: ")?;
        }
        if self.key.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.key, self.message)
        }
    }
}

pub(super) fn problem(key: String, message: String) -> Problem {
    Problem {
        key,
        message,
        position: None,
    }
}

/// Collects every problem of a configuration while it is resolved; each section's
/// `impl Validator` turns its raw table into settings.
pub(super) struct Validator<'a> {
    pub(super) problems: Vec<Problem>,
    pub(super) base: &'a Path,
}

impl Validator<'_> {
    pub(super) fn err(&mut self, key: impl Into<String>, message: impl Into<String>) {
        self.problems.push(problem(key.into(), message.into()));
    }

    pub(super) fn path(&self, p: PathBuf) -> PathBuf {
        if p.is_relative() && !self.base.as_os_str().is_empty() {
            self.base.join(p)
        } else {
            p
        }
    }

    pub(super) fn positive_u64(&mut self, key: &str, raw: Option<u64>, default: u64) -> u64 {
        self.at_least_one(key, raw, default)
    }

    pub(super) fn duration(
        &mut self,
        key: &str,
        raw: Option<String>,
        default: Duration,
    ) -> Duration {
        let Some(raw) = raw else { return default };
        match humantime::parse_duration(&raw) {
            Ok(d) if d.is_zero() => {
                self.err(key, "must be longer than zero");
                default
            }
            Ok(d) => d,
            Err(e) => {
                self.err(
                    key,
                    format!("{raw:?} is not a duration ({e}); write e.g. \"30s\", \"5m\""),
                );
                default
            }
        }
    }

    pub(super) fn positive(&mut self, key: &str, raw: Option<usize>, default: usize) -> usize {
        self.at_least_one(key, raw, default)
    }

    /// `raw`, or `default` when not given; zero is a problem (and gives `default`).
    fn at_least_one<T: Default + PartialEq>(&mut self, key: &str, raw: Option<T>, default: T) -> T {
        match raw {
            Some(n) if n == T::default() => {
                self.err(key, "must be at least 1");
                default
            }
            Some(n) => n,
            None => default,
        }
    }

    pub(super) fn addr(&mut self, key: String, raw: &str) -> Option<SocketAddr> {
        match raw.parse::<SocketAddr>() {
            Ok(a) => Some(a),
            Err(_) => {
                self.err(
                    key,
                    format!(
                        "{raw:?} is not an address:port (e.g. \"127.0.0.1:7070\", \"[::]:7070\")"
                    ),
                );
                None
            }
        }
    }
}
