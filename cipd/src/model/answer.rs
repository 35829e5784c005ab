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
        }
    }
}
