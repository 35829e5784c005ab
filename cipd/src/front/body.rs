//! Reading an HTTP request body whole, within a size limit and the daemon's shared in-flight
//! byte budget ([`crate::sys::budget`]): CIP over HTTP and RDM submissions.

use std::sync::Arc;

use axum::body::Body;
use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use tokio::time::Instant;

use crate::sys::budget::{ByteBudget, Exhausted, Reservation};

/// Why a body was not read.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    /// Larger than the limit.
    #[error("the request body is larger than {limit} bytes")]
    TooLarge {
        /// The limit.
        limit: usize,
    },
    /// The shared budget was not available in time.
    #[error(transparent)]
    Budget(#[from] Exhausted),
    /// Reading failed (the client went away, bad chunking).
    #[error("cannot read the request body: {0}")]
    Read(String),
}

/// Reads `body` whole: at most `max` bytes (a declared `Content-Length` over it is refused
/// before anything is read), growing into `budget` past the free allowance and waiting for
/// it until `deadline`. The reservation is returned with the bytes: hold it while they are.
///
/// # Errors
/// [`BodyError`].
pub async fn read(
    body: Body,
    declared: Option<u64>,
    max: usize,
    budget: Option<&Arc<ByteBudget>>,
    deadline: Instant,
) -> Result<(Bytes, Option<Reservation>), BodyError> {
    if declared.is_some_and(|n| n > max as u64) {
        return Err(BodyError::TooLarge { limit: max });
    }
    let mut reservation = budget.map(|b| b.reservation());
    if let (Some(r), Some(n)) = (&mut reservation, declared) {
        r.cover(n as usize, deadline).await?;
    }
    let mut body = body;
    let mut out = BytesMut::with_capacity(declared.map_or(0, |n| n as usize).min(max));
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| BodyError::Read(e.to_string()))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        if out.len() + data.len() > max {
            return Err(BodyError::TooLarge { limit: max });
        }
        if let Some(r) = &mut reservation {
            r.cover(out.len() + data.len(), deadline).await?;
        }
        crate::sys::alloc::reserve(&mut out, data.len());
        out.extend_from_slice(&data);
    }
    Ok((out.freeze(), reservation))
}
