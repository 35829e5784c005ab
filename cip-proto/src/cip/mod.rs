//! The Common Indexing Protocol's messages and stream framing (RFC 2652, RFC 2653).
//!
//! Layers, bottom up:
//!
//! * [`stream`]: the TCP stream transport's framing: version line, status lines and
//!   dot-terminated messages, as pure parsers plus the tokio-util [`CipCodec`].
//! * [`mime`]: the MIME entities carried in those messages: headers, `Content-Type`
//!   parameters, transfer encodings and `multipart/mixed`.
//! * [`message`]: CIP's own objects on top: [`Request`], [`IndexObject`], [`PollResult`],
//!   [`IndexResponse`], with the response [`code`] to send when parsing fails.
//!
//! Connections, timeouts and TLS live in the daemon (`cipd::transport`); nothing here does
//! I/O. Choices on the RFCs' gaps are recorded in PROTOCOL.md ("CIP transport").

pub mod code;
pub mod message;
pub mod mime;
pub mod stream;

pub use code::{ResponseCode, UnknownCode};
pub use message::{
    IndexObject, IndexResponse, IndexType, IndexTypeError, MessageError, PollResult, Request,
    TypeSpelling,
};
pub use mime::MimeError;
pub use stream::{CipCodec, Expect, Frame, Limits, Status, StreamError};
