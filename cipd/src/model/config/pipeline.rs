//! `[outbound]` and `[import]`: how hints move through the node — in through the import
//! queue ([`crate::pipeline::import`]), out through the out-bound builder ([`crate::pipeline::outbound`]).

use serde::Deserialize;

use super::Validator;
use crate::pipeline::import::ImportConfig;
use crate::pipeline::outbound::OutboundConfig;

/// `[outbound]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawOutbound {
    /// Quiet time before a rebuild (default `"50ms"`).
    pub settle: Option<String>,
    /// Longest a poll waits for an up-to-date hint (default `"30s"`).
    pub max_wait: Option<String>,
    /// Lag after which a warning is logged and a rebuild forced (default `"5s"`).
    pub stale_after: Option<String>,
}

/// `[import]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawImport {
    /// Parsed hints waiting for the import thread (default 64).
    pub queue: Option<usize>,
    /// Most weightlist entries imported in one batch (default 4,000,000).
    pub max_batch_entries: Option<usize>,
    /// In-bound hints parsed at once (default: the CPU count).
    pub parsers: Option<usize>,
}

impl Validator<'_> {
    pub(super) fn outbound(&mut self, raw: RawOutbound) -> OutboundConfig {
        let d = OutboundConfig::default();
        OutboundConfig {
            settle: self.duration("outbound.settle", raw.settle, d.settle),
            max_wait: self.duration("outbound.max_wait", raw.max_wait, d.max_wait),
            stale_after: self.duration("outbound.stale_after", raw.stale_after, d.stale_after),
        }
    }

    pub(super) fn import(&mut self, raw: RawImport) -> ImportConfig {
        let d = ImportConfig::default();
        ImportConfig {
            queue: self.positive("import.queue", raw.queue, d.queue),
            max_batch_entries: self.positive(
                "import.max_batch_entries",
                raw.max_batch_entries,
                d.max_batch_entries,
            ),
            parsers: self.positive("import.parsers", raw.parsers, d.parsers),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::model::config::{Config, ConfigError};

    const BASE: &str =
        "data_dir = \"/tmp/cipd-test\"\n[node]\ndsi = \"1.2.3\"\nbase_uri = \"cip://n/\"\n";

    #[test]
    fn defaults_and_settings() {
        let c = Config::from_toml(BASE).unwrap();
        assert_eq!(c.outbound, Default::default());
        assert_eq!(c.import, Default::default());
        let c = Config::from_toml(&format!(
            "{BASE}[outbound]\nsettle = \"1s\"\nmax_wait = \"2s\"\nstale_after = \"3s\"\n\
             [import]\nqueue = 5\nmax_batch_entries = 6\nparsers = 7\n"
        ))
        .unwrap();
        assert_eq!(c.outbound.settle, Duration::from_secs(1));
        assert_eq!(c.outbound.max_wait, Duration::from_secs(2));
        assert_eq!(c.outbound.stale_after, Duration::from_secs(3));
        assert_eq!(
            (c.import.queue, c.import.max_batch_entries, c.import.parsers),
            (5, 6, 7)
        );
    }

    #[test]
    fn the_example_configuration_states_the_defaults() {
        let c = Config::from_toml(include_str!("../../../../deploy/cipd.toml")).unwrap();
        assert_eq!(c.outbound, Default::default());
        assert_eq!(c.import, Default::default());
        assert_eq!(
            c.limits.table.max_total_objects,
            hints::table::DEFAULT_MAX_TOTAL_OBJECTS
        );
    }

    #[test]
    fn bad_values_name_their_keys() {
        let err = Config::from_toml(&format!(
            "{BASE}[outbound]\nsettle = \"soon\"\n[import]\nqueue = 0\n[limits]\nmax_total_objects = 0\n"
        ))
        .unwrap_err();
        assert!(matches!(err, ConfigError::Invalid { .. }), "{err}");
        let keys: Vec<&str> = err.problems().iter().map(|p| p.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "limits.max_total_objects",
                "outbound.settle",
                "import.queue"
            ]
        );
    }
}
