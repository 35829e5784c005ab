//! The JSON answers of the query API (`/v1/referrals`, `/v1/objects`), shared by the
//! front-ends that write them and the answer cache that keeps them.

use hints::answer::ReferralView;
use serde::{Deserialize, Serialize};

/// One referral as the HTTP API returns it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReferralJson {
    /// The dataset's DSI.
    pub dsi: String,
    /// Where to send the query next.
    pub base_uri: Vec<String>,
    /// The dataset's description, when known.
    pub dsi_description: Option<String>,
    /// Estimated matching objects (0 for possible referrals).
    pub count: u64,
    /// Objects in the dataset.
    pub total: u64,
    /// True when reported values matched every term.
    pub definite: bool,
    /// Matched values with their counts.
    pub values: Vec<(String, u64)>,
    /// Its polls fail now: the dataset may not answer (PROTOCOL.md, "Peers that come and
    /// go").
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unreachable: bool,
}

/// The answer to `/v1/referrals`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueryAnswer {
    /// The query as given.
    pub query: String,
    /// The answering node's DSI (clients detect loops by it, RFC 2651 §4).
    pub dsi: String,
    /// Ranked referrals, at most the request's `limit`.
    pub referrals: Vec<ReferralJson>,
    /// More referrals rank below these: ask again with a larger `limit` (up to
    /// `limits.max_referrals`) for them.
    #[serde(default)]
    pub more: bool,
    /// Local objects matching the query (fetch them from `/v1/objects`).
    pub local: u64,
}

/// One object as `/v1/objects` returns it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectJson {
    /// Template type.
    pub template: String,
    /// URL.
    pub url: String,
    /// Attribute-value pairs in order (values as UTF-8, lossy).
    pub attributes: Vec<(String, String)>,
}

/// The answer to `/v1/objects`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectsAnswer {
    /// The query as given.
    pub query: String,
    /// This node's DSI.
    pub dsi: String,
    /// Matching objects (at most the limit).
    pub objects: Vec<ObjectJson>,
    /// All matching objects.
    pub total: u64,
}

impl From<ReferralView<'_>> for ReferralJson {
    fn from(r: ReferralView<'_>) -> Self {
        Self {
            dsi: r.dsi().to_string(),
            base_uri: r.base_uris().to_vec(),
            dsi_description: r.dsi_description().map(str::to_owned),
            count: r.count(),
            total: r.total(),
            definite: r.definite(),
            values: r
                .values()
                .map(|(v, c)| (String::from_utf8_lossy(v).into_owned(), c))
                .collect(),
            unreachable: false,
        }
    }
}

/// Why a referral was not chased by a search ([`Unchased`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NotChased {
    /// The search's budget of sub-queries (`search.max_subqueries`) was spent.
    Budget,
    /// The hop limit was reached.
    Depth,
    /// The deadline passed before it answered (or before it could be asked).
    Deadline,
    /// Its base-URI is not one this node may contact (not a peer's host, link-local, this
    /// node itself), or its scheme is not one the search speaks.
    Refused,
    /// It failed: now, or recently enough that it is left alone (`search.failure_ttl`).
    Unreachable,
    /// Enough objects had come back (the search's `limit`).
    Limit,
}

impl NotChased {
    /// The spelling used in JSON and in the logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Budget => "budget",
            Self::Depth => "depth",
            Self::Deadline => "deadline",
            Self::Refused => "refused",
            Self::Unreachable => "unreachable",
            Self::Limit => "limit",
        }
    }

    /// True when leaving it out may have lost matching objects the search could have found
    /// (all but [`NotChased::Limit`]).
    pub fn makes_partial(self) -> bool {
        self != Self::Limit
    }
}

/// A referral a search did not chase, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unchased {
    /// The dataset referred to.
    pub dsi: String,
    /// Where it is asked.
    pub base_uri: Vec<String>,
    /// Objects its hint says match (0 when unknown, as for the nodes that poll this one).
    pub count: u64,
    /// Why it was not chased.
    pub reason: NotChased,
    /// The node that held the referral.
    pub via: String,
    /// More about the reason (the error, the refused host).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// One object a search found, with the node that holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FoundObject {
    /// The DSI of the node (dataset) holding it.
    pub holder: String,
    /// That node's base-URI.
    pub holder_uri: String,
    /// Template type.
    pub template: String,
    /// URL.
    pub url: String,
    /// Attribute-value pairs in order.
    pub attributes: Vec<(String, String)>,
}

/// One node a search asked, as its trace shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Asked {
    /// The node's DSI.
    pub dsi: String,
    /// The URI it was asked at.
    pub uri: String,
    /// The node that asked it.
    pub via: String,
    /// Hops from the node the client asked (1: asked by it).
    pub depth: u32,
    /// `down` (a referral of the asker's table), `up` (a node that polls the asker) or
    /// `server-to-ask` (a Whois++ server's referral).
    pub direction: String,
    /// Milliseconds from asking to its answer (0 when cached).
    pub ms: f64,
    /// `ok`, `cached`, `failed`, `timeout` or `bad-answer`.
    pub outcome: String,
    /// Objects it (and the nodes it asked) returned.
    pub objects: u64,
    /// The error, when it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The answer to `/v1/search`: the objects of the whole mesh that match, found by chasing
/// referrals from the node asked (PROTOCOL.md, "Search").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchAnswer {
    /// The query as given.
    pub query: String,
    /// The node that answered.
    pub dsi: String,
    /// The search's trace id (W3C `traceparent`), as every node's log names it.
    pub trace_id: String,
    /// Matching objects, at most the request's `limit`, grouped by holder.
    pub objects: Vec<FoundObject>,
    /// More objects were found (or referrals left for the limit) than `objects` holds.
    #[serde(default)]
    pub more: bool,
    /// Referrals not chased, with why.
    pub unchased: Vec<Unchased>,
    /// True when objects may be missing: something was not chased for a reason other than
    /// the limit, or failed.
    pub partial: bool,
    /// True when some node's objects are its last answer kept from before, served because
    /// it could not answer now (RFC 8767 serve-stale; its `nodes` entry says `stale`).
    #[serde(default)]
    pub stale: bool,
    /// Every node asked, in the order answers came.
    pub nodes: Vec<Asked>,
    /// Datasets not asked because the search had asked them already (RFC 1914 loop
    /// detection by DSI); part of what a cached answer is valid for.
    #[serde(default)]
    pub skipped: Vec<String>,
    /// Sub-requests this answer cost in the whole mesh.
    pub subqueries: u32,
    /// Milliseconds from the request to the answer.
    pub elapsed_ms: f64,
}
