//! `[console]`: the operators' web console on the HTTP listener ([`crate::front::console`]).
//!
//! ```toml
//! [console]
//! path = "/"          # the page; "" turns the console and its JSON endpoints off
//! token = "..."       # optional: a bearer token the console and its JSON endpoints require
//! ```
//!
//! Beyond a trusted network, serve the console on an `[[listen.https]]` listener with
//! `client_ca`: only holders of a certificate from the mesh CA get past the handshake.

use serde::Deserialize;

use super::validate::Validator;
use crate::model::routes::CONSOLE_ENDPOINTS;

/// The console's default path.
pub const DEFAULT_CONSOLE_PATH: &str = "/";

/// Shortest accepted `console.token`, in bytes.
pub const MIN_TOKEN_LEN: usize = 16;

/// The routes of the query API and `/metrics`, which the console must leave alone.
use crate::model::routes::FIXED_ROUTES;

/// `[console]` as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConsole {
    /// Where the page is served (default `"/"`; `""` turns the console off).
    pub path: Option<String>,
    /// A bearer token required for the page and its JSON endpoints.
    pub token: Option<String>,
}

/// The console's validated settings.
#[derive(Clone, PartialEq, Eq)]
pub struct ConsoleConfig {
    /// Path of the page; `None` when the console is off. Assets are served under
    /// [`ConsoleConfig::asset_prefix`].
    pub path: Option<String>,
    /// The bearer token the page and the JSON endpoints require, if any.
    pub token: Option<String>,
}

impl Default for ConsoleConfig {
    fn default() -> Self {
        Self {
            path: Some(DEFAULT_CONSOLE_PATH.to_owned()),
            token: None,
        }
    }
}

// By hand: the token must never reach a log line through `{:?}` of the configuration.
impl std::fmt::Debug for ConsoleConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsoleConfig")
            .field("path", &self.path)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl ConsoleConfig {
    /// Where the console's assets live (`/console/` for the page at `/`, `/ops/console/` for
    /// `/ops`), when the console is on.
    pub fn asset_prefix(&self) -> Option<String> {
        self.path.as_deref().map(asset_prefix)
    }
}

/// The asset directory of a console at `path`, with its trailing slash.
fn asset_prefix(path: &str) -> String {
    format!("{}/console/", path.trim_end_matches('/'))
}

impl Validator<'_> {
    /// Validates `[console]`; `others` are the paths other HTTP front-ends serve (CIP over
    /// HTTP, Hina-Di, RDM), each with its key, which the console's routes must not overlap
    /// (axum refuses overlapping routes when the router is built).
    pub(super) fn console(
        &mut self,
        raw: RawConsole,
        others: &[(&str, &Option<String>)],
    ) -> ConsoleConfig {
        let path = match raw.path {
            None => Some(DEFAULT_CONSOLE_PATH.to_owned()),
            Some(p) if p.is_empty() => None,
            Some(p) if valid_path(&p) => Some(p),
            Some(p) => {
                self.err(
                    "console.path",
                    format!(
                        "{p:?}: expected a path such as \"/\" or \"/console\" (letters, digits, \
                         and / . _ ~ -), or \"\" for none"
                    ),
                );
                None
            }
        };
        if let Some(p) = &path {
            let prefix = asset_prefix(p);
            let overlaps = |t: &str| t == p.as_str() || t.starts_with(&prefix);
            let clash = FIXED_ROUTES
                .iter()
                .chain(CONSOLE_ENDPOINTS)
                .copied()
                .chain(others.iter().filter_map(|(_, o)| o.as_deref()))
                .find(|t| overlaps(t));
            if let Some(t) = clash {
                self.err(
                    "console.path",
                    format!("{p:?} overlaps {t:?}, served by another route; pick another path"),
                );
            }
            // The console's JSON endpoints sit at fixed paths: another front-end may not
            // take them while the console is on.
            for (key, other) in others {
                if let Some(o) = other
                    && CONSOLE_ENDPOINTS.contains(&o.as_str())
                {
                    self.err(
                        *key,
                        format!("{o:?} is served by the console; pick another path"),
                    );
                }
            }
        }
        let token = match raw.token {
            None => None,
            Some(t) if t.len() < MIN_TOKEN_LEN => {
                self.err(
                    "console.token",
                    format!(
                        "must be at least {MIN_TOKEN_LEN} characters (leave the key out for no \
                         token)"
                    ),
                );
                None
            }
            Some(t) if !t.bytes().all(|b| b.is_ascii_graphic()) => {
                // It travels in an Authorization header and a query string.
                self.err("console.token", "must be printable ASCII without spaces");
                None
            }
            Some(t) => Some(t),
        };
        ConsoleConfig { path, token }
    }
}

/// A path axum can route literally: no parameters (`{id}`), wildcards or query syntax.
fn valid_path(p: &str) -> bool {
    p.starts_with('/')
        && !p.contains("//")
        && p.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'/' | b'.' | b'_' | b'~' | b'-'))
}

#[cfg(test)]
mod tests {
    use crate::model::config::Config;

    use super::*;

    const BASE: &str = "data_dir = \"/tmp/x\"\n[node]\ndsi = \"1.3.6.1.4.1.99999.1\"\n\
                        [listen]\nhttp = [\"127.0.0.1:0\"]\n";

    fn problems(extra: &str) -> Vec<String> {
        match Config::from_toml(&format!("{BASE}{extra}")) {
            Ok(_) => Vec::new(),
            Err(e) => e.problems().iter().map(ToString::to_string).collect(),
        }
    }

    #[test]
    fn defaults_and_settings() {
        let c = Config::from_toml(BASE).unwrap();
        assert_eq!(c.console, ConsoleConfig::default());
        assert_eq!(c.console.path.as_deref(), Some("/"));
        assert_eq!(c.console.asset_prefix().as_deref(), Some("/console/"));
        let c = Config::from_toml(&format!(
            "{BASE}[console]\npath = \"/ops\"\ntoken = \"0123456789abcdef\"\n"
        ))
        .unwrap();
        assert_eq!(c.console.path.as_deref(), Some("/ops"));
        assert_eq!(c.console.asset_prefix().as_deref(), Some("/ops/console/"));
        assert_eq!(c.console.token.as_deref(), Some("0123456789abcdef"));
        let off = Config::from_toml(&format!("{BASE}[console]\npath = \"\"\n")).unwrap();
        assert_eq!(off.console.path, None);
        assert_eq!(off.console.asset_prefix(), None);
    }

    #[test]
    fn the_token_stays_out_of_debug_output() {
        let c = ConsoleConfig {
            path: Some("/".into()),
            token: Some("sekrit-sekrit-sekrit".into()),
        };
        let shown = format!("{c:?}");
        assert!(!shown.contains("sekrit"), "{shown}");
        assert!(shown.contains("<redacted>"), "{shown}");
    }

    #[test]
    fn bad_values_are_refused() {
        for (extra, key) in [
            ("[console]\npath = \"console\"\n", "console.path"),
            ("[console]\npath = \"/{id}\"\n", "console.path"),
            ("[console]\npath = \"/a?b\"\n", "console.path"),
            ("[console]\npath = \"//\"\n", "console.path"),
            ("[console]\npath = \"/metrics\"\n", "console.path"),
            ("[console]\npath = \"/v1/peers\"\n", "console.path"),
            ("[console]\npath = \"/hina.di\"\n", "console.path"),
            ("[console]\ntoken = \"short\"\n", "console.token"),
            (
                "[console]\ntoken = \"has a space in it ok\"\n",
                "console.token",
            ),
            ("[rdm]\npath = \"/v1/mesh\"\n", "rdm.path"),
            ("[hinadi]\npath = \"/console/app.js\"\n", "console.path"),
            ("[console]\nunknown = 1\n", "console"),
        ] {
            let p = problems(extra);
            assert!(
                p.iter().any(|m| m.contains(key)),
                "{extra:?}: expected a problem with {key}, got {p:?}"
            );
        }
        // Off: nothing to clash with.
        assert!(problems("[console]\npath = \"\"\n[rdm]\npath = \"/v1/mesh\"\n").is_empty());
        // Other front-ends elsewhere are fine.
        assert!(problems("[console]\npath = \"/ops\"\n[rdm]\npath = \"/\"\n").is_empty());
    }

    #[test]
    fn the_deploy_example_states_the_defaults() {
        let c = Config::from_toml(include_str!("../../../../deploy/cipd.toml")).unwrap();
        assert_eq!(c.console, ConsoleConfig::default());
    }
}
