//! `[search]`: the chasing search of `/v1/search`, `/search`, `cipctl search` and Whois++'s
//! `chase` constraint ([`crate::pipeline::search`]).
//!
//! ```toml
//! [search]
//! enabled = true            # serve searches that chase referrals through the mesh
//! max_subqueries = 32       # sub-requests one client search may cost in the whole mesh
//! deadline = "2s"           # longest a search takes; clients may ask for less
//! max_depth = 8             # hops from the node a client asked
//! default_limit = 50        # objects per answer unless the client asks (at most limits.max_objects)
//! allow = ["127.0.0.0/8", "::1/128", "192.0.2.0/24"]   # default: loopback and the peers' addresses
//! rate = 20                 # searches per second per client address (bursts of twice that)
//! targets = []              # hosts or networks sub-queries may go to besides the peers'
//! cache_entries = 4096      # answers kept (sub-queries' and this node's own)
//! cache_ttl = "60s"         # longest an answer is reused
//! failure_ttl = "30s"       # a node that failed is left alone this long, doubling while it fails
//! max_failure_ttl = "5m"
//! infra_entries = 4096      # nodes whose round-trip times and failures are remembered
//! max_answer_bytes = 4194304  # most bytes read from one sub-query's answer
//! stale_ttl = "1h"          # a failed node's last answer is served (marked stale) this long; "0s": never
//! ```

use std::time::Duration;

use ipnet::IpNet;
use serde::Deserialize;

use super::validate::Validator;

/// Default `search.max_subqueries` (unbound's `max-global-quota` is 128 for DNS, whose
/// lookups need several targets each; a CIP sub-query needs one).
pub const DEFAULT_MAX_SUBQUERIES: u32 = 32;
/// Default `search.deadline`.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(2);
/// Default `search.max_depth` (Whois++ meshes capped hop counts at 8, RFC 1913).
pub const DEFAULT_MAX_DEPTH: u32 = 8;
/// Default `search.default_limit`.
pub const DEFAULT_LIMIT: usize = 50;
/// Default `search.rate`, searches per second per client address.
pub const DEFAULT_RATE: u32 = 20;
/// Default `search.cache_entries` and `search.infra_entries`.
pub const DEFAULT_ENTRIES: usize = 4096;
/// Default `search.cache_ttl`.
pub const DEFAULT_CACHE_TTL: Duration = Duration::from_secs(60);
/// Default `search.failure_ttl` (RFC 9520: a failed server is not asked again for at
/// least a few seconds; 30 s keeps a dead node to one timeout per half minute).
pub const DEFAULT_FAILURE_TTL: Duration = Duration::from_secs(30);
/// Default `search.max_failure_ttl` (RFC 9520 §3.2: at most five minutes).
pub const DEFAULT_MAX_FAILURE_TTL: Duration = Duration::from_secs(300);
/// Default `search.max_answer_bytes`.
pub const DEFAULT_MAX_ANSWER_BYTES: u64 = 4 << 20;
/// Default `search.stale_ttl` (RFC 8767 suggests one to three days for DNS, whose data
/// changes seldom; a collection's objects change more often).
pub const DEFAULT_STALE_TTL: Duration = Duration::from_secs(3600);

/// `[search]` as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSearch {
    /// Serve chasing searches (default true).
    pub enabled: Option<bool>,
    /// Sub-requests one client search may cost in the whole mesh.
    pub max_subqueries: Option<u32>,
    /// Longest a search takes.
    pub deadline: Option<String>,
    /// Most hops from the entry node.
    pub max_depth: Option<u32>,
    /// Objects per answer unless the client asks.
    pub default_limit: Option<usize>,
    /// Client networks served (CIDR or bare addresses).
    pub allow: Option<Vec<String>>,
    /// Searches per second per client address.
    pub rate: Option<u32>,
    /// Hosts (names) or networks (CIDR) sub-queries may go to besides the peers'.
    #[serde(default)]
    pub targets: Vec<String>,
    /// Answers kept.
    pub cache_entries: Option<usize>,
    /// Longest an answer is reused.
    pub cache_ttl: Option<String>,
    /// How long a failed node is left alone at first.
    pub failure_ttl: Option<String>,
    /// Longest a failed node is left alone.
    pub max_failure_ttl: Option<String>,
    /// Nodes whose round-trip times are remembered.
    pub infra_entries: Option<usize>,
    /// Most bytes read from one sub-query's answer.
    pub max_answer_bytes: Option<u64>,
    /// How long a failed node's last answer is served, marked stale (`"0s"`: never).
    pub stale_ttl: Option<String>,
}

/// A host sub-queries may go to besides the peers' ([`SearchConfig::targets`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetRule {
    /// Any address in this network.
    Net(IpNet),
    /// A host name, compared without case.
    Name(String),
}

/// The chasing search's validated settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchConfig {
    /// Chasing searches are served.
    pub enabled: bool,
    /// Sub-requests one client search may cost in the whole mesh.
    pub max_subqueries: u32,
    /// Longest a search takes.
    pub deadline: Duration,
    /// Most hops from the entry node.
    pub max_depth: u32,
    /// Objects per answer unless the client asks.
    pub default_limit: usize,
    /// Client networks served; `None`: loopback and the configured peers' addresses.
    pub allow: Option<Vec<IpNet>>,
    /// Searches per second per client address (peers are not limited: their sub-requests
    /// carry their searches' budgets).
    pub rate: u32,
    /// Where sub-queries may go besides the peers' hosts.
    pub targets: Vec<TargetRule>,
    /// Answers kept.
    pub cache_entries: usize,
    /// Longest an answer is reused.
    pub cache_ttl: Duration,
    /// How long a failed node is left alone at first (doubling while it keeps failing).
    pub failure_ttl: Duration,
    /// Longest a failed node is left alone.
    pub max_failure_ttl: Duration,
    /// Nodes whose round-trip times and failures are remembered.
    pub infra_entries: usize,
    /// Most bytes read from one sub-query's answer.
    pub max_answer_bytes: u64,
    /// How long a failed node's last answer is served, marked stale (RFC 8767); zero:
    /// never.
    pub stale_ttl: Duration,
}

impl Default for SearchConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            max_subqueries: DEFAULT_MAX_SUBQUERIES,
            deadline: DEFAULT_DEADLINE,
            max_depth: DEFAULT_MAX_DEPTH,
            default_limit: DEFAULT_LIMIT,
            allow: None,
            rate: DEFAULT_RATE,
            targets: Vec::new(),
            cache_entries: DEFAULT_ENTRIES,
            cache_ttl: DEFAULT_CACHE_TTL,
            failure_ttl: DEFAULT_FAILURE_TTL,
            max_failure_ttl: DEFAULT_MAX_FAILURE_TTL,
            infra_entries: DEFAULT_ENTRIES,
            max_answer_bytes: DEFAULT_MAX_ANSWER_BYTES,
            stale_ttl: DEFAULT_STALE_TTL,
        }
    }
}

/// Parses `192.0.2.0/24`, `2001:db8::/32` or a bare address (a network of one).
///
/// # Errors
/// A message saying what was expected.
pub fn parse_net(s: &str) -> Result<IpNet, String> {
    let s = s.trim();
    if let Ok(n) = s.parse::<IpNet>() {
        return Ok(n.trunc());
    }
    s.parse::<std::net::IpAddr>()
        .map(IpNet::from)
        .map_err(|_| format!("{s:?}: expected a network such as \"192.0.2.0/24\" or an address"))
}

impl Validator<'_> {
    /// Validates `[search]`.
    pub(super) fn search(&mut self, raw: RawSearch) -> SearchConfig {
        let d = SearchConfig::default();
        let allow = raw.allow.map(|list| {
            list.iter()
                .enumerate()
                .filter_map(|(i, s)| {
                    parse_net(s)
                        .map_err(|m| self.err(format!("search.allow[{i}]"), m))
                        .ok()
                })
                .collect()
        });
        let targets = raw
            .targets
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                let s = s.trim();
                if s.contains('/') || s.parse::<std::net::IpAddr>().is_ok() {
                    return parse_net(s)
                        .map(TargetRule::Net)
                        .map_err(|m| self.err(format!("search.targets[{i}]"), m))
                        .ok();
                }
                let name_ok = !s.is_empty()
                    && s.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.'));
                if name_ok {
                    Some(TargetRule::Name(s.to_ascii_lowercase()))
                } else {
                    self.err(
                        format!("search.targets[{i}]"),
                        format!("{s:?}: expected a host name, an address or a network (CIDR)"),
                    );
                    None
                }
            })
            .collect();
        let failure_ttl = self.duration("search.failure_ttl", raw.failure_ttl, d.failure_ttl);
        let max_failure_ttl = self.duration(
            "search.max_failure_ttl",
            raw.max_failure_ttl,
            d.max_failure_ttl,
        );
        if max_failure_ttl < failure_ttl {
            self.err(
                "search.max_failure_ttl",
                "must be at least search.failure_ttl",
            );
        }
        let max_answer_bytes = self.positive_u64(
            "search.max_answer_bytes",
            raw.max_answer_bytes,
            d.max_answer_bytes,
        );
        let stale_ttl = match raw.stale_ttl.as_deref().map(str::trim) {
            Some("0" | "0s" | "off") => Duration::ZERO,
            _ => self.duration("search.stale_ttl", raw.stale_ttl, d.stale_ttl),
        };
        SearchConfig {
            stale_ttl,
            enabled: raw.enabled.unwrap_or(true),
            max_subqueries: raw.max_subqueries.unwrap_or(d.max_subqueries),
            deadline: self.duration("search.deadline", raw.deadline, d.deadline),
            max_depth: raw.max_depth.unwrap_or(d.max_depth),
            default_limit: self.positive(
                "search.default_limit",
                raw.default_limit,
                d.default_limit,
            ),
            allow,
            rate: self
                .positive_u64("search.rate", raw.rate.map(u64::from), u64::from(d.rate))
                .try_into()
                .unwrap_or(u32::MAX),
            targets,
            cache_entries: self.positive(
                "search.cache_entries",
                raw.cache_entries,
                d.cache_entries,
            ),
            cache_ttl: self.duration("search.cache_ttl", raw.cache_ttl, d.cache_ttl),
            failure_ttl,
            max_failure_ttl,
            infra_entries: self.positive(
                "search.infra_entries",
                raw.infra_entries,
                d.infra_entries,
            ),
            max_answer_bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str) -> Result<SearchConfig, Vec<String>> {
        let raw: RawSearch = toml::from_str(text).map_err(|e| vec![e.to_string()])?;
        let mut v = Validator {
            problems: Vec::new(),
            base: std::path::Path::new(""),
        };
        let c = v.search(raw);
        if v.problems.is_empty() {
            Ok(c)
        } else {
            Err(v.problems.iter().map(|p| p.key.clone()).collect())
        }
    }

    #[test]
    fn defaults_and_values() {
        let c = check("").unwrap();
        assert_eq!(c, SearchConfig::default());
        let c = check(
            "allow = [\"10.0.0.0/8\", \"192.0.2.7\"]\ntargets = [\"hub.example.org\", \"198.51.100.0/24\"]\nmax_subqueries = 0\ndeadline = \"500ms\"",
        )
        .unwrap();
        assert_eq!(c.allow.as_ref().unwrap().len(), 2);
        assert_eq!(c.allow.as_ref().unwrap()[1].to_string(), "192.0.2.7/32");
        assert_eq!(c.targets[0], TargetRule::Name("hub.example.org".into()));
        assert_eq!(c.max_subqueries, 0, "0: answer from this node alone");
        assert_eq!(c.deadline, Duration::from_millis(500));
        assert_eq!(
            check("stale_ttl = \"0s\"").unwrap().stale_ttl,
            Duration::ZERO
        );
    }

    #[test]
    fn mistakes_are_named() {
        let e = check("allow = [\"10.0.0.0/33\"]\ntargets = [\"http://x/\"]\nrate = 0\nfailure_ttl = \"1m\"\nmax_failure_ttl = \"10s\"")
            .unwrap_err();
        assert_eq!(
            e,
            [
                "search.allow[0]",
                "search.targets[0]",
                "search.max_failure_ttl",
                "search.rate"
            ]
        );
    }
}
