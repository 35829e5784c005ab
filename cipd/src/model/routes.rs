//! The HTTP paths that are not the operator's to give: the configuration keeps the optional
//! front-ends (Hina-Di, RDM, CIP over HTTP, the console page) off them.

/// The routes every HTTP listener serves whatever the configuration: optional routes
/// (Hina-Di, RDM, CIP over HTTP, the console) must not take these paths.
pub const FIXED_ROUTES: &[&str] = &[
    "/v1/referrals",
    "/v1/objects",
    "/v1/status",
    "/v1/search",
    "/search",
    "/metrics",
    "/healthz",
    "/readyz",
];

/// The JSON endpoints served with the console (besides the query API's `/v1/status`), at
/// fixed paths: the configuration keeps other front-ends off them.
pub const CONSOLE_ENDPOINTS: &[&str] = &[
    "/v1/node",
    "/v1/peers",
    "/v1/table",
    "/v1/explain",
    "/v1/mesh",
    "/v1/counters",
    "/v1/counters/history",
];
