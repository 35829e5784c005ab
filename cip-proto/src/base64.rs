//! Base64 for SOIF payloads and MIME `Content-Transfer-Encoding: base64` (RFC 2045 §6.8).
//!
//! RFC 2655 §3 asks for SOIF payloads to travel Base64-encoded unless the template rules out
//! binary values. The encoder wraps lines at 76 characters with CRLF as MIME requires; the
//! decoder ignores line breaks and other whitespace and reports the offset of a bad character.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

/// Line length of MIME Base64 output (RFC 2045 §6.8).
pub const LINE_LEN: usize = 76;

/// A Base64 body that could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid base64 at byte {offset}: {reason}")]
pub struct Base64Error {
    /// Offset in the encoded input.
    pub offset: usize,
    /// What is wrong there.
    pub reason: String,
}

/// Encodes `data` as MIME Base64: lines of at most 76 characters, each ending in CRLF.
pub fn encode_mime(data: &[u8]) -> Vec<u8> {
    let flat = STANDARD.encode(data);
    let mut out = Vec::with_capacity(flat.len() + flat.len() / LINE_LEN * 2 + 2);
    for line in flat.as_bytes().chunks(LINE_LEN) {
        out.extend_from_slice(line);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Encodes `data` as one line of Base64 with no line breaks.
pub fn encode_line(data: &[u8]) -> String {
    STANDARD.encode(data)
}

/// Decodes Base64, ignoring whitespace (CR, LF, space, tab) anywhere in the input.
///
/// # Errors
/// [`Base64Error`] with the offset of the first offending character in `input`.
pub fn decode_mime(input: &[u8]) -> Result<Vec<u8>, Base64Error> {
    // Drop whitespace run by run (MIME bodies are 76-character lines), then decode in one go.
    let mut compact = Vec::with_capacity(input.len());
    let mut rest = input;
    while !rest.is_empty() {
        let run = rest.iter().position(|&b| is_space(b)).unwrap_or(rest.len());
        compact.extend_from_slice(&rest[..run]);
        let spaces = rest[run..].iter().take_while(|&&b| is_space(b)).count();
        rest = &rest[run + spaces..];
    }
    STANDARD.decode(&compact).map_err(|e| {
        let (at, reason) = match e {
            base64::DecodeError::InvalidByte(at, b) => (at, format!("unexpected byte 0x{b:02x}")),
            base64::DecodeError::InvalidLastSymbol { offset: at, .. } => {
                (at, "invalid last symbol".into())
            }
            base64::DecodeError::InvalidLength(_) => (compact.len(), "truncated input".into()),
            base64::DecodeError::InvalidPadding => (compact.len(), "invalid padding".into()),
        };
        Base64Error {
            offset: input_offset(input, at),
            reason,
        }
    })
}

fn is_space(b: u8) -> bool {
    matches!(b, b'\r' | b'\n' | b' ' | b'\t')
}

/// The offset in `input` of the `at`-th non-whitespace byte (the input length past the end).
fn input_offset(input: &[u8], at: usize) -> usize {
    input
        .iter()
        .enumerate()
        .filter(|&(_, &b)| !is_space(b))
        .nth(at)
        .map_or(input.len(), |(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_wrapped() {
        let data: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
        let enc = encode_mime(&data);
        assert!(enc.split(|&b| b == b'\n').all(|l| l.len() <= LINE_LEN + 1));
        assert_eq!(decode_mime(&enc).unwrap(), data);
    }

    #[test]
    fn error_offset_counts_whitespace() {
        let e = decode_mime(b"QUJD\r\nR!==").unwrap_err();
        assert_eq!(e.offset, 7);
        let e = decode_mime(b" QUJD\r\n\r\n QU").unwrap_err();
        assert_eq!(e.offset, 12, "truncated input points at its end");
        assert_eq!(decode_mime(b" QU\tJD \r\n").unwrap(), b"ABC");
        assert_eq!(decode_mime(b"").unwrap(), b"");
    }
}
