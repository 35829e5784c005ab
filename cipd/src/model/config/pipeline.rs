//! `[outbound]` and `[import]`: how hints move through the node — in through the import
//! queue ([`crate::pipeline::import`]), out through the out-bound builder ([`crate::pipeline::outbound`]).

use std::time::Duration;

use hints::delta::journal::JournalLimits;
use serde::Deserialize;

use super::validate::Validator;

/// `[outbound]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawOutbound {
    /// Quiet time before a rebuild (default `"50ms"`).
    pub settle: Option<String>,
    /// Longest a poll waits for an up-to-date hint (default `"10s"`, below the pollers' `limits.stall_timeout`).
    pub max_wait: Option<String>,
    /// Lag after which a warning is logged and a rebuild forced (default `"5s"`).
    pub stale_after: Option<String>,
    /// Changesets of the out-bound hints kept for pollers a few answers behind (default
    /// 20; 0 keeps none).
    pub journal_changesets: Option<usize>,
    /// Bytes of changesets kept at most (default 16 MiB).
    pub journal_bytes: Option<usize>,
}

/// `[import]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawImport {
    /// Parsed hints waiting for the import thread (default: 64, or half of
    /// `limits.max_concurrent_polls` when that is more; see `scale_to_peers`).
    pub queue: Option<usize>,
    /// Most weightlist entries imported in one batch (default 4,000,000).
    pub max_batch_entries: Option<usize>,
    /// In-bound hints parsed at once (default: the CPU count).
    pub parsers: Option<usize>,
    /// Threads that index a big batch of hints, and at 1 keep big merges on one thread
    /// (default: the CPU count, at most 4).
    pub index_threads: Option<usize>,
    /// How much lower than the daemon's the CPU priority of the import thread and the
    /// table's summary builds is, in nice steps (default 10; 0 to 19; 0: the same).
    pub background_nice: Option<i32>,
}

impl Validator<'_> {
    pub(super) fn outbound(&mut self, raw: RawOutbound) -> OutboundConfig {
        let d = OutboundConfig::default();
        OutboundConfig {
            settle: self.duration("outbound.settle", raw.settle, d.settle),
            max_wait: self.duration("outbound.max_wait", raw.max_wait, d.max_wait),
            stale_after: self.duration("outbound.stale_after", raw.stale_after, d.stale_after),
            journal: JournalLimits {
                changesets: raw.journal_changesets.unwrap_or(d.journal.changesets),
                bytes: self.positive("outbound.journal_bytes", raw.journal_bytes, d.journal.bytes),
            },
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
            index_threads: self.positive(
                "import.index_threads",
                raw.index_threads,
                d.index_threads,
            ),
            background_nice: match raw.background_nice {
                None => d.background_nice,
                Some(n @ 0..=19) => n,
                Some(n) => {
                    self.err(
                        "import.background_nice",
                        format!("{n} is not a nice step from 0 to 19"),
                    );
                    d.background_nice
                }
            },
        }
    }
}

/// Settings of the import queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImportConfig {
    /// Parsed hints waiting for the import thread (default 64).
    pub queue: usize,
    /// Most weightlist entries imported in one batch (default 4,000,000).
    pub max_batch_entries: usize,
    /// In-bound hints parsed at once on the blocking pool (default: the CPU count).
    pub parsers: usize,
    /// Threads that index a big batch of hints (at 1, big merges stay on one thread too);
    /// 0 (the default) leaves the choice to the table (the CPU count, at most 4: [`hints::table::TableConfig::index_threads`]).
    pub index_threads: usize,
    /// Nice steps the import thread and the table's background summary builds run below
    /// the async workers (default 10): on CPUs short of time, queries and polls are
    /// answered first and the imports take what is left.
    pub background_nice: i32,
}

impl Default for ImportConfig {
    fn default() -> Self {
        Self {
            queue: 64,
            max_batch_entries: 4_000_000,
            parsers: std::thread::available_parallelism().map_or(2, usize::from),
            index_threads: 0,
            background_nice: 10,
        }
    }
}

/// Sets the poll concurrency and the import queue that the configuration leaves unset from
/// the number of peers polled: `limits.max_concurrent_polls` 128, or three in eight of
/// the polled peers up to 384 (a hub of 1,000 peers: 375); `import.queue` 64, or half the
/// polls. A hub's cold start then imports batches of about a fifth of its peers, which
/// are indexed on several threads once they reach a million entries, while the hints
/// parsed and waiting grow with the table they fill (the import's peak stays near 1.4x
/// the settled memory): every peer of a 1,000 x 10,000-entry hub in the table after
/// 4.65-5.72 s on two cores (median 4.96 s over nine runs), against 5.69-6.43 s (median
/// 5.80 s) with 128 polls and batches of 64 hints on one thread.
pub fn scale_to_peers(
    polls: &mut usize,
    polls_given: bool,
    queue: &mut usize,
    queue_given: bool,
    polled_peers: usize,
) {
    if !polls_given {
        *polls = (polled_peers * 3 / 8).clamp(*polls, 384.max(*polls));
    }
    if !queue_given {
        *queue = (*queue).max(*polls / 2);
    }
}

/// Settings of the pipeline (`[outbound]` in the configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutboundConfig {
    /// Quiet time before a build, so that a burst of changes makes one build (default
    /// 50 ms; the builder also waits at least as long as its last build took).
    pub settle: Duration,
    /// Longest a poll waits for a hint that covers the changes made before it arrived;
    /// past it the poll is answered with the newest hint there is (default 30 s).
    pub max_wait: Duration,
    /// The out-bound hint lagging the table for longer than this is logged as a warning and
    /// rebuilt (default 5 s).
    pub stale_after: Duration,
    /// How many changesets of the out-bound hints, and how many bytes of them, are kept so
    /// that a poller a few answers behind still gets a delta (default 20 and 16 MiB, as a
    /// DNS server's IXFR journal; PROTOCOL.md, "The delta journal").
    pub journal: JournalLimits,
}

impl Default for OutboundConfig {
    fn default() -> Self {
        Self {
            settle: Duration::from_millis(50),
            max_wait: Duration::from_secs(10),
            stale_after: Duration::from_secs(5),
            journal: JournalLimits::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::scale_to_peers;
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
             [import]\nqueue = 5\nmax_batch_entries = 6\nparsers = 7\nbackground_nice = 0\n"
        ))
        .unwrap();
        assert_eq!(c.outbound.settle, Duration::from_secs(1));
        assert_eq!(c.outbound.max_wait, Duration::from_secs(2));
        assert_eq!(c.outbound.stale_after, Duration::from_secs(3));
        assert_eq!(
            (c.import.queue, c.import.max_batch_entries, c.import.parsers),
            (5, 6, 7)
        );
        assert_eq!(c.import.background_nice, 0);
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
    fn polls_and_the_import_queue_grow_with_the_polled_peers_unless_set() {
        let scaled = |peers: usize, polls: Option<usize>, queue: Option<usize>| {
            let (mut p, mut q) = (polls.unwrap_or(128), queue.unwrap_or(64));
            scale_to_peers(&mut p, polls.is_some(), &mut q, queue.is_some(), peers);
            (p, q)
        };
        assert_eq!(scaled(0, None, None), (128, 64));
        assert_eq!(scaled(200, None, None), (128, 64));
        assert_eq!(scaled(1000, None, None), (375, 187));
        assert_eq!(scaled(100_000, None, None), (384, 192));
        assert_eq!(scaled(1000, Some(16), None), (16, 64));
        assert_eq!(scaled(1000, None, Some(8)), (375, 8));
        assert_eq!(scaled(1000, Some(1000), None), (1000, 500));

        let mut text = String::from(BASE);
        for k in 0..1000 {
            text.push_str(&format!(
                "[[peer]]\nname = \"p{k}\"\nhost = \"127.0.0.1\"\nport = 7000\nrole = [\"poll\"]\n"
            ));
        }
        let c = Config::from_toml(&text).unwrap();
        assert_eq!((c.limits.max_concurrent_polls, c.import.queue), (375, 187));
        let c = Config::from_toml(&text.replacen(
            "[[peer]]",
            "[limits]\nmax_concurrent_polls = 100\n[import]\nqueue = 10\n[[peer]]",
            1,
        ))
        .unwrap();
        assert_eq!((c.limits.max_concurrent_polls, c.import.queue), (100, 10));
    }

    #[test]
    fn bad_values_name_their_keys() {
        let err = Config::from_toml(&format!(
            "{BASE}[outbound]\nsettle = \"soon\"\n[import]\nqueue = 0\nbackground_nice = 20\n[limits]\nmax_total_objects = 0\n"
        ))
        .unwrap_err();
        assert!(matches!(err, ConfigError::Invalid { .. }), "{err}");
        let keys: Vec<&str> = err.problems().iter().map(|p| p.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "limits.max_total_objects",
                "outbound.settle",
                "import.queue",
                "import.background_nice"
            ]
        );
    }
}
