//! The console's JSON endpoints: their parameters and handlers, answered as the admin socket
//! would.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Query as QueryParams, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::types::{Counters, MeshInfo, counters_now, mesh_info};
use crate::front::admin::backend::NodeAdmin;
use crate::front::admin::{AdminBackend, AdminError, AdminRequest};
use crate::front::api::ApiError;
use crate::node::Node;

/// Most rows `/v1/table` answers (`top`).
pub const MAX_TOP: usize = 1000;

/// Parameters of `/v1/table`.
#[derive(Debug, Default, Deserialize)]
pub struct TableArgs {
    /// Only this `Template:Attribute`.
    pub attr: Option<String>,
    /// Only this peer's DSI.
    pub peer: Option<String>,
    /// Only values starting with this (ASCII case ignored).
    pub prefix: Option<String>,
    /// At most this many rows (default 50, at most [`MAX_TOP`]).
    pub top: Option<String>,
}

impl TableArgs {
    /// The admin request these parameters make.
    ///
    /// # Errors
    /// `bad-parameter` for a `top` that is not 1 to [`MAX_TOP`].
    pub fn request(self) -> Result<AdminRequest, ApiError> {
        let top = match self.top.as_deref().map(str::trim) {
            None | Some("") => 50,
            Some(s) => match s.parse::<usize>() {
                Ok(n) if (1..=MAX_TOP).contains(&n) => n,
                _ => {
                    return Err(bad_parameter(format!(
                        "top={s:?}: expected an integer from 1 to {MAX_TOP}"
                    )));
                }
            },
        };
        let given = |v: Option<String>| v.filter(|s| !s.is_empty());
        Ok(AdminRequest::Table {
            attr: given(self.attr),
            peer: given(self.peer),
            prefix: given(self.prefix),
            top,
        })
    }
}

/// Parameters of `/v1/explain`.
#[derive(Debug, Default, Deserialize)]
pub struct ExplainArgs {
    /// The query, as `/v1/referrals` takes it.
    pub q: Option<String>,
    /// Include possible referrals (`true`/`false`).
    pub possible: Option<String>,
}

impl ExplainArgs {
    /// The admin request these parameters make.
    ///
    /// # Errors
    /// `missing-query` without `q`, `bad-parameter` for a `possible` that is no boolean.
    pub fn request(self) -> Result<AdminRequest, ApiError> {
        let query = match self.q {
            Some(q) if !q.trim().is_empty() => q,
            _ => {
                return Err(ApiError {
                    status: StatusCode::BAD_REQUEST,
                    kind: "missing-query",
                    message: "the q parameter (the query) is required".into(),
                });
            }
        };
        let possible = match self.possible.as_deref() {
            None | Some("false" | "0" | "no") => false,
            Some("true" | "1" | "yes" | "") => true,
            Some(other) => {
                return Err(bad_parameter(format!(
                    "possible={other:?}: expected true or false"
                )));
            }
        };
        Ok(AdminRequest::Explain { query, possible })
    }
}

fn bad_parameter(message: String) -> ApiError {
    ApiError {
        status: StatusCode::BAD_REQUEST,
        kind: "bad-parameter",
        message,
    }
}

/// An admin refusal as an HTTP error; `invalid` is the kind an invalid argument gets.
fn admin_error(e: AdminError, invalid: &'static str) -> ApiError {
    let (status, kind) = match &e {
        AdminError::InvalidArgument(_) => (StatusCode::BAD_REQUEST, invalid),
        AdminError::UnknownPeer(_) => (StatusCode::NOT_FOUND, "not-found"),
        _ => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
    };
    ApiError {
        status,
        kind,
        message: e.to_string(),
    }
}

/// Answers `request` as the admin socket would.
async fn admin(node: Arc<Node>, request: AdminRequest) -> Result<Response, ApiError> {
    let value = NodeAdmin::new(node)
        .handle(request)
        .await
        .map_err(|e| admin_error(e, "bad-parameter"))?;
    Ok(Json(value).into_response())
}

/// As [`admin`], for commands that may scan the table (a substring query, a prefix): on the
/// blocking pool, at most `limits.max_concurrent_scans` at once, like `/v1/referrals`.
async fn admin_scan(
    node: Arc<Node>,
    request: AdminRequest,
    invalid: &'static str,
) -> Result<Response, ApiError> {
    let _turn = node.scan_permit().await;
    let runtime = tokio::runtime::Handle::current();
    let backend = NodeAdmin::new(node.clone());
    // `block_on` is allowed on a blocking-pool thread; `table` and `explain` never wait on
    // I/O, so this only moves their CPU work off the async workers.
    let answer = tokio::task::spawn_blocking(move || runtime.block_on(backend.handle(request)))
        .await
        .map_err(|e| ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            kind: "internal",
            message: format!("console task failed: {e}"),
        })?;
    Ok(Json(answer.map_err(|e| admin_error(e, invalid))?).into_response())
}

pub(super) async fn node_info(State(node): State<Arc<Node>>) -> Result<Response, ApiError> {
    admin(node, AdminRequest::Status).await
}

pub(super) async fn peers(State(node): State<Arc<Node>>) -> Result<Response, ApiError> {
    admin(node, AdminRequest::Peers).await
}

pub(super) async fn table(
    State(node): State<Arc<Node>>,
    QueryParams(args): QueryParams<TableArgs>,
) -> Result<Response, ApiError> {
    admin_scan(node, args.request()?, "bad-parameter").await
}

pub(super) async fn explain(
    State(node): State<Arc<Node>>,
    QueryParams(args): QueryParams<ExplainArgs>,
) -> Result<Response, ApiError> {
    admin_scan(node, args.request()?, "bad-query").await
}

pub(super) async fn mesh(State(node): State<Arc<Node>>) -> Json<MeshInfo> {
    Json(mesh_info(&node))
}

pub(super) async fn counters(State(node): State<Arc<Node>>) -> Json<Counters> {
    Json(counters_now(&node))
}
