//! What an in-bound index object becomes ([`Converted`]: routing-table entries and what the
//! spool keeps), or why it is refused ([`Rejection`]); and the `HARVEST-SOIF-1` reading
//! ([`parse_hint`]). Each index type of [`crate::pipeline::index_types`] converts to these.

use bytes::Bytes;
use cip_proto::soif::parse_all;
use hints::hint::CipHint;
use hints::table::ImportError;

/// An in-bound payload as table entries, and what to keep of it.
#[derive(Debug, Clone)]
pub struct Converted {
    /// The entries, as a hint.
    pub hint: CipHint,
    /// What the spool keeps: the payload itself, or for a tagged incremental update the
    /// total it produced.
    pub stored: Bytes,
}

/// Why an in-bound index object was refused; [`Rejection::code`] is the CIP answer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Rejection {
    /// Not `HARVEST-SOIF-1`.
    #[error("index object type {0} not accepted; this mesh passes HARVEST-SOIF-1")]
    UnsupportedType(String),
    /// The payload is not one CIP-HINT object.
    #[error("invalid hint: {0}")]
    Invalid(String),
    /// The table refused it (own DSI, loop, limits).
    #[error("{0}")]
    Refused(#[from] ImportError),
    /// It could not be stored.
    #[error("cannot store the hint: {0}")]
    Storage(String),
    /// Its DSI is not the sending peer's (see [`crate::store::binding`]).
    #[error("{0}")]
    Binding(#[from] crate::store::binding::BindingError),
    /// Its signature is missing, invalid, replayed or cannot be checked
    /// ([`crate::model::trust`]).
    #[error("signature: {0}")]
    Signature(#[from] crate::model::trust::signature::SignatureError),
}

impl Rejection {
    /// The CIP response code for this refusal (digest A8: 501 for a refused type, 400 when
    /// the refusal is temporary).
    pub fn code(&self) -> cip_proto::cip::ResponseCode {
        use cip_proto::cip::ResponseCode as C;
        match self {
            Self::UnsupportedType(_) => C::UnknownRequest,
            Self::Invalid(_) => C::BadMimeFormat,
            Self::Refused(
                ImportError::TooManyPeers { .. }
                | ImportError::TooLarge
                | ImportError::OverTableBudget { .. },
            ) => C::TemporarilyUnable,
            Self::Refused(_) => C::UnknownRequest,
            Self::Storage(_) => C::TemporarilyUnable,
            // Refused on authentication grounds: RFC 2652 §4.2 wants the 530 series.
            Self::Binding(_) => C::SignatureRequired,
            Self::Signature(e) => e.code(),
        }
    }
}

/// Parses an index object's payload: exactly one CIP-HINT SOIF object.
///
/// # Errors
/// [`Rejection::Invalid`] saying what is wrong.
pub fn parse_hint(payload: &Bytes, limits: cip_proto::soif::Limits) -> Result<CipHint, Rejection> {
    let objs = parse_all(payload.clone(), limits)
        .map_err(|e| Rejection::Invalid(format!("payload is not SOIF: {e}")))?;
    let [obj] = objs.as_slice() else {
        return Err(Rejection::Invalid(format!(
            "expected one CIP-HINT object, found {}",
            objs.len()
        )));
    };
    let (hint, warnings) =
        CipHint::from_soif(obj).map_err(|e| Rejection::Invalid(e.to_string()))?;
    for w in warnings {
        tracing::debug!(warning = ?w, "hint accepted with a warning");
    }
    Ok(hint)
}
