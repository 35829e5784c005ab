//! Signed hints: `[signing]` (the node's own key) and each `[[peer]]`'s `public_key` and
//! `signatures` policy ([`crate::model::trust`]).
//!
//! ```toml
//! [signing]
//! key = "keys/node.key"      # PKCS#8 PEM from `cipctl keygen`; mode 0600
//! max_clock_skew = "5m"      # how far ahead of our clock a peer's hint Date may be
//!
//! [[peer]]
//! name = "leaf"
//! public_key = "ed25519:..."           # or a list, while the peer rotates keys
//! signatures = "require"               # | "verify-if-present" | "ignore"
//! ```
//!
//! A peer with a key defaults to `require`; one without defaults to `ignore`.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::validate::{OneOrMany, Validator};
use crate::model::trust::keys::PublicKey;
use crate::model::trust::signature::{PeerTrust, Policy};

/// Default allowed skew between a peer's clock and ours.
pub const DEFAULT_MAX_CLOCK_SKEW: Duration = Duration::from_secs(300);

/// `[signing]` as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSigning {
    /// The node's private key file; out-bound hints are signed when set.
    pub key: Option<PathBuf>,
    /// Largest allowed lead of a peer's hint `Date` over our clock.
    pub max_clock_skew: Option<String>,
}

/// The validated `[signing]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SigningConfig {
    /// The node's private key file, resolved against the configuration's directory.
    pub key: Option<PathBuf>,
    /// Largest allowed lead of a peer's hint `Date` over our clock.
    pub max_clock_skew: Duration,
}

impl Default for SigningConfig {
    fn default() -> Self {
        Self {
            key: None,
            max_clock_skew: DEFAULT_MAX_CLOCK_SKEW,
        }
    }
}

impl Validator<'_> {
    /// Validates `[signing]`.
    pub(super) fn signing(&mut self, raw: RawSigning) -> SigningConfig {
        SigningConfig {
            key: raw.key.map(|p| self.path(p)),
            max_clock_skew: self.duration(
                "signing.max_clock_skew",
                raw.max_clock_skew,
                DEFAULT_MAX_CLOCK_SKEW,
            ),
        }
    }

    /// Validates a peer's `public_key` and `signatures` (`key` is `peer[i]`).
    pub(super) fn peer_trust(
        &mut self,
        key: &str,
        public_key: Option<OneOrMany>,
        signatures: Option<String>,
    ) -> PeerTrust {
        let mut keys = Vec::new();
        for text in public_key.map(OneOrMany::into_vec).unwrap_or_default() {
            match PublicKey::parse(&text) {
                Ok(k) => keys.push(k),
                Err(e) => self.err(format!("{key}.public_key"), e.to_string()),
            }
        }
        let policy = match signatures.as_deref() {
            None if keys.is_empty() => Policy::Ignore,
            None => Policy::Require,
            Some(p) => Policy::parse(p).unwrap_or_else(|| {
                self.err(
                    format!("{key}.signatures"),
                    format!(
                        "unknown policy {p:?}; expected \"require\", \"verify-if-present\" or \
                         \"ignore\""
                    ),
                );
                Policy::Ignore
            }),
        };
        if policy != Policy::Ignore && keys.is_empty() {
            self.err(
                format!("{key}.signatures"),
                format!(
                    "{:?} needs the peer's public_key (\"ed25519:...\", from its node.pub)",
                    policy.as_str()
                ),
            );
        }
        PeerTrust { keys, policy }
    }
}

#[cfg(test)]
mod tests {
    use crate::model::config::Config;
    use crate::model::trust::keys::NodeKey;

    use super::*;

    const BASE: &str = "data_dir = \"/tmp/x\"\n[node]\ndsi = \"1.3.6.1.4.1.99999.1\"\n\
                        [listen]\nhttp = [\"127.0.0.1:0\"]\n";

    fn peer(extra: &str) -> String {
        format!(
            "{BASE}[[peer]]\nname = \"leaf\"\nhost = \"leaf.example\"\nport = 7070\n\
             role = \"poll\"\n{extra}"
        )
    }

    fn problems(text: &str) -> Vec<String> {
        match Config::from_toml(text) {
            Ok(_) => Vec::new(),
            Err(e) => e.problems().iter().map(ToString::to_string).collect(),
        }
    }

    #[test]
    fn defaults_follow_the_keys() {
        let c = Config::from_toml(&peer("")).unwrap();
        assert_eq!(c.signing, SigningConfig::default());
        assert_eq!(c.peers[0].trust, PeerTrust::default());
        assert_eq!(c.peers[0].trust.policy, Policy::Ignore);
        let k1 = NodeKey::from_seed(&[1; 32]).public().to_string();
        let k2 = NodeKey::from_seed(&[2; 32]).public().to_string();
        let c = Config::from_toml(&format!(
            "{}[signing]\nkey = \"/etc/cipd/node.key\"\nmax_clock_skew = \"1m\"\n",
            peer(&format!("public_key = [\"{k1}\", \"{k2}\"]\n"))
        ))
        .unwrap();
        assert_eq!(c.peers[0].trust.policy, Policy::Require);
        assert_eq!(c.peers[0].trust.keys.len(), 2);
        assert_eq!(
            c.signing.key.as_deref(),
            Some(std::path::Path::new("/etc/cipd/node.key"))
        );
        assert_eq!(c.signing.max_clock_skew, Duration::from_secs(60));
        let c = Config::from_toml(&peer(&format!(
            "public_key = \"{k1}\"\nsignatures = \"verify-if-present\"\n"
        )))
        .unwrap();
        assert_eq!(c.peers[0].trust.policy, Policy::VerifyIfPresent);
    }

    #[test]
    fn mistakes_name_their_key() {
        let p = problems(&peer("signatures = \"require\"\n"));
        assert!(
            p.iter()
                .any(|m| m.contains("peer[0].signatures") && m.contains("public_key")),
            "{p:?}"
        );
        let p = problems(&peer("public_key = \"ssh-ed25519 AAAA\"\n"));
        assert!(
            p.iter()
                .any(|m| m.contains("peer[0].public_key") && m.contains("ed25519:")),
            "{p:?}"
        );
        let p = problems(&peer("signatures = \"sometimes\"\n"));
        assert!(p.iter().any(|m| m.contains("unknown policy")), "{p:?}");
        let p = problems(&format!("{BASE}[signing]\nmax_clock_skew = \"soon\"\n"));
        assert!(
            p.iter().any(|m| m.contains("signing.max_clock_skew")),
            "{p:?}"
        );
        let p = problems(&format!("{BASE}[signing]\nkeyfile = \"x\"\n"));
        assert!(!p.is_empty());
    }
}
