//! Logging setup: a `tracing-subscriber` registry with an `EnvFilter` behind a reload handle
//! and a text or JSON formatter writing to standard error.
//!
//! Only the `cipd` binary calls [`init`]; the library only emits events. The filter comes from
//! `RUST_LOG` when set, otherwise from the configured level. [`LogHandle::set_level`] swaps the
//! filter at run time (the admin `log-level` command uses it).

use serde::Deserialize;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry, reload};

/// Changes the active log filter of the installed subscriber.
#[derive(Clone)]
pub struct LogHandle {
    handle: reload::Handle<EnvFilter, Registry>,
}

impl std::fmt::Debug for LogHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogHandle")
            .field("filter", &self.current())
            .finish()
    }
}

/// A log filter that does not parse, or a subscriber that could not be installed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LogError {
    /// The directive is not a valid `EnvFilter`.
    #[error("invalid log filter {directive:?}: {message}")]
    BadFilter {
        /// What was given.
        directive: String,
        /// Why it does not parse.
        message: String,
    },
    /// A global subscriber was already installed, or the filter could not be swapped.
    #[error("cannot install the log subscriber: {0}")]
    Install(String),
}

impl LogHandle {
    /// Replaces the filter with `directive` (`debug`, `cipd::peer=trace,info`).
    ///
    /// # Errors
    /// When the directive does not parse (the old filter stays).
    pub fn set_level(&self, directive: &str) -> Result<(), LogError> {
        let filter = parse(directive)?;
        self.handle
            .reload(filter)
            .map_err(|e| LogError::Install(e.to_string()))
    }

    /// The active filter, as a directive string.
    pub fn current(&self) -> String {
        self.handle
            .with_current(|f| f.to_string())
            .unwrap_or_default()
    }
}

fn parse(directive: &str) -> Result<EnvFilter, LogError> {
    EnvFilter::builder()
        .parse(directive)
        .map_err(|e| LogError::BadFilter {
            directive: directive.to_owned(),
            message: e.to_string(),
        })
}

/// The filter directive in force: `RUST_LOG` if set and non-empty, else `configured`.
pub fn effective_directive(configured: &str) -> String {
    match std::env::var("RUST_LOG") {
        Ok(v) if !v.trim().is_empty() => v,
        _ => configured.to_owned(),
    }
}

/// Installs the global subscriber.
///
/// # Errors
/// When the filter does not parse or a subscriber is already installed.
pub fn init(format: LogFormat, level: &str) -> Result<LogHandle, LogError> {
    let filter = parse(&effective_directive(level))?;
    let (filter, handle) = reload::Layer::new(filter);
    // Colours only on a terminal (and not with NO_COLOR): journald and log files get plain
    // text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    let fmt: Box<dyn Layer<_> + Send + Sync> = match format {
        LogFormat::Text => fmt.boxed(),
        LogFormat::Json => fmt.json().flatten_event(true).boxed(),
    };
    tracing_subscriber::registry()
        .with(filter)
        .with(fmt)
        .try_init()
        .map_err(|e| LogError::Install(e.to_string()))?;
    Ok(LogHandle { handle })
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handle_swaps_and_refuses_bad_filters() {
        let (layer, handle) = reload::Layer::<EnvFilter, Registry>::new(parse("info").unwrap());
        let _subscriber = tracing_subscriber::registry().with(layer);
        let h = LogHandle { handle };
        assert_eq!(h.current(), "info");
        h.set_level("cipd=debug,warn").unwrap();
        assert!(h.current().contains("cipd=debug"), "{}", h.current());
        assert!(matches!(h.set_level("=="), Err(LogError::BadFilter { .. })));
        assert!(h.current().contains("cipd=debug"));
    }
}
