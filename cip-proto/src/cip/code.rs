//! CIP response codes (RFC 2653 §2.1.1, RFC 2652 Appendix B).
//!
//! Only thirteen codes are defined. RFC 2652 Appendix B says an undefined code is a fatal
//! protocol error and that implementations must not invent codes, so [`ResponseCode`] is a
//! closed enum and [`ResponseCode::try_from`] fails on anything else.

use std::fmt;

/// One of the thirteen CIP response codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ResponseCode {
    /// 200: the request was received and processed; no output follows.
    Ok,
    /// 201: the request was received and processed; a dot-terminated result follows.
    OkOutputFollows,
    /// 220: the receiver's initial banner.
    Banner,
    /// 222: the receiver closes the connection after the sender's half-close.
    Closing,
    /// 300: the requested CIP version is accepted.
    VersionAccepted,
    /// 400: temporarily unable to process the request.
    TemporarilyUnable,
    /// 500: bad MIME message format.
    BadMimeFormat,
    /// 501: unknown or missing request in `application/index.cmd`.
    UnknownRequest,
    /// 502: the request is missing required CIP attributes.
    MissingAttributes,
    /// 520: the connection is aborted for an unexpected reason.
    Aborting,
    /// 530: the request requires a valid signature.
    SignatureRequired,
    /// 531: the request has an invalid signature.
    InvalidSignature,
    /// 532: the signature cannot be checked.
    CannotCheckSignature,
}

/// A three-digit code that CIP does not define; a fatal protocol error (RFC 2652 App. B).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("undefined cip response code {0}")]
pub struct UnknownCode(pub u16);

impl ResponseCode {
    /// Every defined code, in numeric order.
    pub const ALL: [Self; 13] = [
        Self::Ok,
        Self::OkOutputFollows,
        Self::Banner,
        Self::Closing,
        Self::VersionAccepted,
        Self::TemporarilyUnable,
        Self::BadMimeFormat,
        Self::UnknownRequest,
        Self::MissingAttributes,
        Self::Aborting,
        Self::SignatureRequired,
        Self::InvalidSignature,
        Self::CannotCheckSignature,
    ];

    /// The numeric code.
    pub const fn code(self) -> u16 {
        match self {
            Self::Ok => 200,
            Self::OkOutputFollows => 201,
            Self::Banner => 220,
            Self::Closing => 222,
            Self::VersionAccepted => 300,
            Self::TemporarilyUnable => 400,
            Self::BadMimeFormat => 500,
            Self::UnknownRequest => 501,
            Self::MissingAttributes => 502,
            Self::Aborting => 520,
            Self::SignatureRequired => 530,
            Self::InvalidSignature => 531,
            Self::CannotCheckSignature => 532,
        }
    }

    /// The suggested text from the RFC tables (RFC 2653 §2.1.1, RFC 2652 Appendix B).
    pub const fn text(self) -> &'static str {
        match self {
            Self::Ok => "MIME request received and processed",
            Self::OkOutputFollows => "MIME request received and processed, output follows",
            Self::Banner => "Initial server banner message",
            Self::Closing => "Connection closing (in response to sender-CIP close)",
            Self::VersionAccepted => "Requested CIP version accepted",
            Self::TemporarilyUnable => "Temporarily unable to process request",
            Self::BadMimeFormat => "Bad MIME message format",
            Self::UnknownRequest => "Unknown or missing request in application/index.cmd",
            Self::MissingAttributes => "Request is missing required CIP attributes",
            Self::Aborting => "Aborting connection for some unexpected reason",
            Self::SignatureRequired => "Request requires valid signature",
            Self::InvalidSignature => "Request has invalid signature",
            Self::CannotCheckSignature => "Cannot check signature",
        }
    }

    /// True for the 2xx codes (positive completion).
    pub const fn is_success(self) -> bool {
        self.code() / 100 == 2
    }

    /// True for the 5xx codes (permanent failure).
    pub const fn is_permanent_failure(self) -> bool {
        self.code() / 100 == 5
    }
}

impl TryFrom<u16> for ResponseCode {
    type Error = UnknownCode;
    fn try_from(code: u16) -> Result<Self, Self::Error> {
        Self::ALL
            .into_iter()
            .find(|c| c.code() == code)
            .ok_or(UnknownCode(code))
    }
}

impl From<ResponseCode> for u16 {
    fn from(code: ResponseCode) -> Self {
        code.code()
    }
}

impl fmt::Display for ResponseCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_code_and_rejects_others() {
        for code in ResponseCode::ALL {
            assert_eq!(ResponseCode::try_from(code.code()), Ok(code));
            assert!(!code.text().is_empty());
        }
        let defined: Vec<u16> = ResponseCode::ALL.iter().map(|c| c.code()).collect();
        assert_eq!(
            defined,
            [
                200, 201, 220, 222, 300, 400, 500, 501, 502, 520, 530, 531, 532
            ]
        );
        for n in 0..1000u16 {
            if !defined.contains(&n) {
                assert_eq!(ResponseCode::try_from(n), Err(UnknownCode(n)));
            }
        }
    }

    #[test]
    fn classes() {
        assert!(ResponseCode::OkOutputFollows.is_success());
        assert!(!ResponseCode::VersionAccepted.is_success());
        assert!(ResponseCode::CannotCheckSignature.is_permanent_failure());
        assert!(!ResponseCode::TemporarilyUnable.is_permanent_failure());
    }
}
