//! `[node]`: the node's identity (its DSI, base URIs and description).

use cip_proto::Dsi;
use serde::Deserialize;

use super::validate::{OneOrMany, Validator};

/// `[node]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawNode {
    /// The node's dataset identifier (an OID, RFC 2652 §2.1.2).
    pub dsi: Option<String>,
    /// Base URI(s) put on the out-bound index object; default: the first HTTP listener.
    #[serde(default)]
    pub base_uri: Option<OneOrMany>,
    /// Human-friendly description sent with the DSI (RFC 2651 §4.1).
    pub description: Option<String>,
}

/// This node's identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeConfig {
    /// DSI of the node (and of its out-bound aggregate).
    pub dsi: Dsi,
    /// Base URIs; empty means "the first HTTP listener", filled in when it is bound.
    pub base_uris: Vec<String>,
    /// DSI-description (RFC 2651 §4.1).
    pub description: Option<String>,
}

/// A DSI that stands in for a bad one while the validator collects problems.
#[allow(clippy::expect_used, reason = "\"0\" matches the DSI grammar")]
fn placeholder_dsi() -> Dsi {
    Dsi::new("0").expect("\"0\" is a valid dsi")
}

fn check_uri(u: &str) -> Result<(), String> {
    let Some((scheme, rest)) = u.split_once(':') else {
        return Err(format!("{u:?} is not a URI (no scheme)"));
    };
    let scheme_ok = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
    if !scheme_ok || rest.is_empty() {
        return Err(format!("{u:?} is not a URI"));
    }
    if u.chars()
        .any(|c| c.is_whitespace() || c == '"' || c.is_control())
    {
        return Err(format!(
            "{u:?} holds whitespace, a quote or a control character"
        ));
    }
    Ok(())
}

impl Validator<'_> {
    pub(super) fn node(&mut self, raw: RawNode) -> NodeConfig {
        let dsi = match raw.dsi.as_deref().map(Dsi::new) {
            Some(Ok(d)) => d,
            Some(Err(e)) => {
                self.err("node.dsi", e.to_string());
                placeholder_dsi()
            }
            None => {
                self.err(
                    "node.dsi",
                    "is required: the node's dataset identifier (an OID)",
                );
                placeholder_dsi()
            }
        };
        let base_uris = raw.base_uri.map(OneOrMany::into_vec).unwrap_or_default();
        for (i, u) in base_uris.iter().enumerate() {
            if let Err(m) = check_uri(u) {
                self.err(format!("node.base_uri[{i}]"), m);
            }
        }
        if let Some(d) = &raw.description
            && d.chars().any(char::is_control)
        {
            self.err(
                "node.description",
                "must be one line of text without control characters",
            );
        }
        NodeConfig {
            dsi,
            base_uris,
            description: raw.description,
        }
    }
}
