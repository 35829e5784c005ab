//! How every HTTP route answers an error: [`ApiError`], sent as a JSON [`ErrorBody`] with a
//! fitting status. Shared by the query API, the console, `/hina.di`, RDM and CIP over HTTP.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use crate::store::local::QueryError;

/// An error answered as JSON with a fitting status.
#[derive(Debug)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Short machine-readable kind (`bad-query`).
    pub kind: &'static str,
    /// Human-readable message.
    pub message: String,
}

/// The JSON body of an error.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ErrorBody {
    /// HTTP status code.
    pub status: u16,
    /// Machine-readable kind.
    pub error: String,
    /// Human-readable message.
    pub message: String,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            status: self.status.as_u16(),
            error: self.kind.to_owned(),
            message: self.message,
        };
        (self.status, Json(body)).into_response()
    }
}

impl From<QueryError> for ApiError {
    fn from(e: QueryError) -> Self {
        let (status, kind) = match &e {
            QueryError::Syntax(_) => (StatusCode::BAD_REQUEST, "bad-query"),
            QueryError::BadParameter { .. } => (StatusCode::BAD_REQUEST, "bad-parameter"),
            QueryError::NotIndexed { .. } => (StatusCode::BAD_REQUEST, "not-indexed"),
            QueryError::Store(_) => (StatusCode::INTERNAL_SERVER_ERROR, "store-error"),
        };
        Self {
            status,
            kind,
            message: e.to_string(),
        }
    }
}
