//! The CIP TCP stream framing (RFC 2653 §2.1) as a tokio-util codec.
//!
//! Three kinds of frame travel on the stream:
//!
//! * the version line `# CIP-Version: 3` (sender to receiver, once);
//! * status lines `% NNN text`, possibly after Whois++ continuation lines `% NNN-text`
//!   (receiver to sender);
//! * dot-terminated messages: lines up to a line holding only `.`, where every line made
//!   only of periods carries one extra period (RFC 2653 §2.1; not SMTP's rule, digest A13).
//!
//! The stream does not say which kind comes next, the protocol state does, so the codec is
//! told what to [`Expect`]. The work is done by pure functions over `&[u8]`
//! ([`scan_message`], [`unstuff`], [`parse_status_line`], [`parse_version_line`]) that fuzz
//! and property tests drive directly; [`CipCodec`] only keeps their resumable state and
//! `split_to`s whole frames, so a slow sender never makes decoding quadratic.
//!
//! Line ends: CRLF is emitted; CRLF or a bare LF is accepted. Message bodies come back
//! byte-exact apart from the removal of the stuffing period; the decoded message is every
//! byte before the terminator line, including the last line's line end.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

use super::code::{ResponseCode, UnknownCode};

/// Size and count limits for the stream and MIME layers. The RFCs set none (digest A19).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Longest line, in bytes, not counting its line end.
    pub max_line: usize,
    /// Largest message on the wire (stuffing included, terminator line excluded), in bytes.
    pub max_message: usize,
    /// Largest MIME header section, and largest status-line block, in bytes.
    pub max_header: usize,
    /// Most parts in a `multipart/mixed` result.
    pub max_parts: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_line: DEFAULT_MAX_LINE,
            max_message: DEFAULT_MAX_MESSAGE,
            max_header: DEFAULT_MAX_HEADER,
            max_parts: DEFAULT_MAX_PARTS,
        }
    }
}

/// Default [`Limits::max_line`]: 64 KiB.
pub const DEFAULT_MAX_LINE: usize = 64 * 1024;
/// Default [`Limits::max_message`]: 64 MiB.
pub const DEFAULT_MAX_MESSAGE: usize = 64 * 1024 * 1024;
/// Default [`Limits::max_header`]: 64 KiB.
pub const DEFAULT_MAX_HEADER: usize = 64 * 1024;
/// Default [`Limits::max_parts`]: 65 536.
pub const DEFAULT_MAX_PARTS: usize = 65_536;

/// The CIP version this implementation speaks.
pub const CIP_VERSION: u32 = 3;

/// A framing error. Every variant but [`StreamError::Io`] means the peer (or the caller, for
/// encoding) broke the protocol or a limit; the connection cannot continue.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StreamError {
    /// The underlying reader or writer failed.
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
    /// A line longer than [`Limits::max_line`].
    #[error("line at byte {offset} of the frame exceeds {max} bytes")]
    LineTooLong {
        /// Offset of the line's start within the frame.
        offset: usize,
        /// The configured limit.
        max: usize,
    },
    /// A message longer than [`Limits::max_message`].
    #[error("message exceeds {max} bytes")]
    MessageTooLarge {
        /// The configured limit.
        max: usize,
    },
    /// A status block (continuation lines included) longer than [`Limits::max_header`].
    #[error("status lines exceed {max} bytes")]
    StatusTooLarge {
        /// The configured limit.
        max: usize,
    },
    /// A line where a status line was expected that is not `[%] NNN[ -]text`.
    #[error("malformed status line {line:?}")]
    BadStatusLine {
        /// The line, lossily decoded.
        line: String,
    },
    /// A status line whose code CIP does not define: fatal (RFC 2652 Appendix B).
    #[error("status line {line:?}: {source}")]
    UnknownCode {
        /// The line, lossily decoded.
        line: String,
        /// The code.
        source: UnknownCode,
    },
    /// The peer closed its side in the middle of a frame.
    #[error("stream ended inside a frame ({buffered} bytes buffered)")]
    Truncated {
        /// Bytes of the incomplete frame.
        buffered: usize,
    },
}

/// Which frame the protocol state expects next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// One line: the sender's `# CIP-Version: N` (receiver side, after the banner).
    Version,
    /// A dot-terminated message (a request on the receiver side).
    Message,
    /// A dot-terminated result after a `201` (sender side), read with the tolerance legacy
    /// servers need: see [`scan_result`].
    Result,
    /// A status line with optional continuation lines (sender side).
    Status,
}

/// A status line: the code, the comment of the final line, and any continuation lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// The code.
    pub code: ResponseCode,
    /// The final line's comment (human-readable only, RFC 2652 §2.2).
    pub comment: String,
    /// Comments of preceding `NNN-text` continuation lines, in order.
    pub continuation: Vec<String>,
}

impl Status {
    /// A status with `code`'s RFC text as comment.
    pub fn new(code: ResponseCode) -> Self {
        Self {
            code,
            comment: code.text().to_owned(),
            continuation: Vec::new(),
        }
    }

    /// A status with a custom comment.
    pub fn with_comment(code: ResponseCode, comment: impl Into<String>) -> Self {
        Self {
            code,
            comment: comment.into(),
            continuation: Vec::new(),
        }
    }
}

/// A frame read from or written to the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// A line read in [`Expect::Version`] state. `version` is `Some(n)` for a well-formed
    /// `# CIP-Version: n`, `None` for any other line (digest A23: a request before the
    /// version line). Written as `# CIP-Version: n` CRLF; `line` is ignored then.
    Version {
        /// The requested version, if the line is a version line.
        version: Option<u32>,
        /// The line as received, without its line end, lossily decoded.
        line: String,
    },
    /// A status line.
    Status(Status),
    /// A message with the stuffing removed: every byte before the terminator line.
    Message(Bytes),
}

impl Frame {
    /// The version line for [`CIP_VERSION`].
    pub fn version3() -> Self {
        Self::Version {
            version: Some(CIP_VERSION),
            line: String::new(),
        }
    }
}

/// Resumable state of [`scan_message`]. Start from `MessageScan::default()`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MessageScan {
    /// Offset of the first line not yet examined (always a line start).
    pub scanned: usize,
    /// Whether an all-period line (to be unstuffed) was seen.
    pub stuffed: bool,
}

/// Result of [`scan_message`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scan {
    /// More bytes are needed.
    Incomplete,
    /// A whole message: `body_len` bytes of (still stuffed) body, `frame_len` bytes including
    /// the terminator line.
    Complete {
        /// Bytes before the terminator line.
        body_len: usize,
        /// Bytes up to and including the terminator line's line end.
        frame_len: usize,
        /// Whether the body holds stuffed lines ([`unstuff`] is needed).
        stuffed: bool,
    },
}

/// The next complete line of `buf` at `pos`: `(line without its end, offset of the LF)`;
/// `None` when the line is not complete yet.
///
/// # Errors
/// [`StreamError::LineTooLong`] as soon as the line (complete or not) exceeds the limit.
fn next_line<'a>(
    buf: &'a [u8],
    pos: usize,
    limits: &Limits,
) -> Result<Option<(&'a [u8], usize)>, StreamError> {
    let Some(i) = memchr::memchr(b'\n', &buf[pos..]) else {
        // A partial line: "+ 1" leaves room for a CR whose LF has not arrived.
        if buf.len() - pos > limits.max_line.saturating_add(1) {
            return Err(StreamError::LineTooLong {
                offset: pos,
                max: limits.max_line,
            });
        }
        return Ok(None);
    };
    let nl = pos + i;
    let line = strip_cr(&buf[pos..nl]);
    if line.len() > limits.max_line {
        return Err(StreamError::LineTooLong {
            offset: pos,
            max: limits.max_line,
        });
    }
    Ok(Some((line, nl)))
}

/// Refuses a message whose lines scanned so far (up to `pos`) exceed the limit, or — with
/// `buf`, once no terminator is in it — whose buffered bytes prove it will.
fn check_message_size(buf: Option<&[u8]>, pos: usize, limits: &Limits) -> Result<(), StreamError> {
    let buffered = limits
        .max_message
        .saturating_add(limits.max_line)
        .saturating_add(2);
    if pos > limits.max_message || buf.is_some_and(|b| b.len() > buffered) {
        return Err(StreamError::MessageTooLarge {
            max: limits.max_message,
        });
    }
    Ok(())
}

/// Looks for the end of a dot-terminated message in `buf`, resuming at `state.scanned`.
///
/// Lines end in LF with an optional CR before it. Each complete line is examined once, so a
/// message that arrives one byte at a time costs linear time overall.
///
/// # Errors
/// [`StreamError::LineTooLong`] or [`StreamError::MessageTooLarge`] as soon as the buffered
/// bytes prove the limit exceeded, before waiting for more.
pub fn scan_message(
    buf: &[u8],
    state: &mut MessageScan,
    limits: &Limits,
) -> Result<Scan, StreamError> {
    let mut pos = state.scanned;
    while pos < buf.len() {
        let Some((line, nl)) = next_line(buf, pos, limits)? else {
            break;
        };
        if !line.is_empty() && line[0] == b'.' && all_periods(line) {
            if line.len() == 1 {
                let done = Scan::Complete {
                    body_len: pos,
                    frame_len: nl + 1,
                    stuffed: state.stuffed,
                };
                *state = MessageScan::default();
                return Ok(done);
            }
            state.stuffed = true;
        }
        pos = nl + 1;
        check_message_size(None, pos, limits)?;
    }
    state.scanned = pos;
    check_message_size(Some(buf), 0, limits)?;
    Ok(Scan::Incomplete)
}

/// Removes one period from every line of `body` made only of two or more periods.
pub fn unstuff(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len());
    let mut start = 0;
    while start < body.len() {
        let end = memchr::memchr(b'\n', &body[start..]).map_or(body.len(), |i| start + i + 1);
        let line = &body[start..end];
        let content = strip_cr(line.strip_suffix(b"\n").unwrap_or(line));
        if content.len() >= 2 && all_periods(content) {
            out.extend_from_slice(&line[1..]);
        } else {
            out.extend_from_slice(line);
        }
        start = end;
    }
    out
}

/// Resumable state of [`scan_result`]. Start from `ResultScan::default()`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResultScan {
    /// Offset of the first line not yet examined.
    scanned: usize,
    /// Whether an all-period line (to be unstuffed) was seen.
    stuffed: bool,
    /// `None` while in the top-level header section; then the multipart boundary, if any.
    boundary: Option<Option<String>>,
    /// Whether the multipart's close delimiter was seen.
    closed: bool,
    /// A lone `.` line (start, end) inside an open multipart, awaiting the next line.
    held: Option<(usize, usize)>,
    /// Lone `.` lines dropped from the body: (start, end) offsets, end past the LF.
    dropped: Vec<(usize, usize)>,
}

/// Result of [`scan_result`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResultScanned {
    /// More bytes are needed.
    Incomplete,
    /// A whole result.
    Complete {
        /// Bytes before the terminator line.
        body_len: usize,
        /// Bytes up to and including the terminator line's line end.
        frame_len: usize,
        /// Whether the body holds stuffed lines.
        stuffed: bool,
        /// Misplaced terminator lines to remove from the body before unstuffing.
        dropped: Vec<(usize, usize)>,
    },
}

/// The multipart boundary of a header section, if its `Content-Type` is multipart (folded
/// continuation lines are unfolded; names compare ignoring case).
fn header_boundary(head: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(head);
    let mut fields: Vec<String> = Vec::new();
    for line in text.lines() {
        match (line.starts_with([' ', '\t']), fields.last_mut()) {
            (true, Some(last)) => last.push_str(line),
            _ => fields.push(line.to_owned()),
        }
    }
    let value = fields.iter().find_map(|f| {
        let (name, value) = f.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case("content-type")
            .then_some(value)
    })?;
    let ct = super::mime::ContentType::parse(value.trim()).ok()?;
    if !ct.mime_type().starts_with("multipart/") {
        return None;
    }
    ct.param("boundary").map(str::to_owned)
}

/// Like [`scan_message`], for the result that follows a `201`, with the tolerance of
/// legacy CIPv3 servers (PROTOCOL.md, legacy peers): when the result's top-level header
/// section (which may run straight into the first boundary line, without a blank line)
/// declares a multipart, a lone `.` line met before the close delimiter and followed by a
/// delimiter line is a misplaced terminator: it is dropped, and the result runs on to the
/// `.` after the close delimiter. A `.` followed by anything else still ends the result.
///
/// # Errors
/// As [`scan_message`].
pub fn scan_result(
    buf: &[u8],
    state: &mut ResultScan,
    limits: &Limits,
) -> Result<ResultScanned, StreamError> {
    let mut pos = state.scanned;
    while pos < buf.len() {
        let Some((line, nl)) = next_line(buf, pos, limits)? else {
            break;
        };
        if let Some((hs, he)) = state.held.take() {
            // The line after a held `.`: a delimiter makes the `.` misplaced.
            if line.starts_with(b"--") {
                state.dropped.push((hs, he));
            } else {
                let done = ResultScanned::Complete {
                    body_len: hs,
                    frame_len: he,
                    stuffed: state.stuffed,
                    dropped: std::mem::take(&mut state.dropped),
                };
                *state = ResultScan::default();
                return Ok(done);
            }
        }
        if state.boundary.is_none() && (line.is_empty() || line.starts_with(b"--")) {
            if pos > limits.max_header {
                return Err(StreamError::MessageTooLarge {
                    max: limits.max_header,
                });
            }
            state.boundary = Some(header_boundary(&buf[..pos]));
        }
        let open = matches!(&state.boundary, Some(Some(_))) && !state.closed;
        if let Some(Some(b)) = &state.boundary
            && let Some(rest) = line.strip_prefix(b"--")
            && let Some(rest) = rest.strip_prefix(b.as_bytes())
            && rest.starts_with(b"--")
            && trim_end(&rest[2..]).is_empty()
        {
            state.closed = true;
        }
        if !line.is_empty() && line[0] == b'.' && all_periods(line) {
            if line.len() == 1 {
                if open {
                    state.held = Some((pos, nl + 1));
                    pos = nl + 1;
                    continue;
                }
                let done = ResultScanned::Complete {
                    body_len: pos,
                    frame_len: nl + 1,
                    stuffed: state.stuffed,
                    dropped: std::mem::take(&mut state.dropped),
                };
                *state = ResultScan::default();
                return Ok(done);
            }
            state.stuffed = true;
        }
        pos = nl + 1;
        check_message_size(None, pos, limits)?;
    }
    state.scanned = pos;
    check_message_size(Some(buf), 0, limits)?;
    Ok(ResultScanned::Incomplete)
}

/// The end of a result at end of input: a `.` on the last line without its line end ends
/// it as usual; else, when the multipart's close delimiter was seen (a held `.` before it
/// already dropped), everything read is the result; otherwise `None` (cut short).
///
/// # Errors
/// As [`scan_result`].
pub fn result_at_eof(
    buf: &[u8],
    state: &mut ResultScan,
    limits: &Limits,
) -> Result<Option<ResultScanned>, StreamError> {
    // The last line may lack its line end: scan it as if it had one.
    let mut whole = buf.to_vec();
    if !whole.ends_with(b"\n") {
        whole.extend_from_slice(b"\r\n");
    }
    let done = match scan_result(&whole, state, limits)? {
        ResultScanned::Complete {
            body_len,
            frame_len,
            stuffed,
            dropped,
        } => Some(ResultScanned::Complete {
            body_len: body_len.min(buf.len()),
            frame_len: frame_len.min(buf.len()),
            stuffed,
            dropped,
        }),
        ResultScanned::Incomplete if state.closed => Some(ResultScanned::Complete {
            body_len: state
                .held
                .map_or(buf.len(), |(start, _)| start.min(buf.len())),
            frame_len: buf.len(),
            stuffed: state.stuffed,
            dropped: std::mem::take(&mut state.dropped),
        }),
        ResultScanned::Incomplete => None,
    };
    *state = ResultScan::default();
    Ok(done)
}

/// Splits a complete result off `src`: the body without its terminator, misplaced
/// terminator lines removed, unstuffed. An incomplete scan takes nothing.
fn take_result(src: &mut BytesMut, done: ResultScanned) -> Frame {
    let ResultScanned::Complete {
        body_len,
        frame_len,
        stuffed,
        dropped,
    } = done
    else {
        return Frame::Message(Bytes::new());
    };
    let mut frame = src.split_to(frame_len);
    frame.truncate(body_len);
    let frame = if dropped.is_empty() {
        frame
    } else {
        let mut kept = BytesMut::with_capacity(frame.len());
        let mut at = 0;
        for (start, end) in dropped {
            kept.extend_from_slice(&frame[at.min(frame.len())..start.min(frame.len())]);
            at = end;
        }
        kept.extend_from_slice(&frame[at.min(frame.len())..]);
        kept
    };
    let body = if stuffed {
        Bytes::from(unstuff(&frame))
    } else {
        frame.freeze()
    };
    Frame::Message(body)
}

/// Appends `body` to `dst` as a dot-terminated message.
///
/// Lines made only of periods get one more (RFC 2653 §2.1); a body that is not empty and does
/// not end in LF gets CRLF appended (the only change to the bytes); then `.` CRLF.
///
/// # Errors
/// [`StreamError::LineTooLong`] or [`StreamError::MessageTooLarge`] when the peer would have
/// to refuse the message; `dst` is left as it was.
pub fn encode_message(body: &[u8], dst: &mut BytesMut, limits: &Limits) -> Result<(), StreamError> {
    if body.len() > limits.max_message {
        return Err(StreamError::MessageTooLarge {
            max: limits.max_message,
        });
    }
    let before = dst.len();
    dst.reserve(body.len() + 5);
    let mut copied = 0;
    let mut start = 0;
    let mut extra = 0;
    let check_line = |start: usize, line: &[u8]| -> Result<bool, StreamError> {
        let content = strip_cr(line);
        if content.len() > limits.max_line {
            return Err(StreamError::LineTooLong {
                offset: start,
                max: limits.max_line,
            });
        }
        Ok(!content.is_empty() && content[0] == b'.' && all_periods(content))
    };
    let result = (|| {
        for nl in memchr::memchr_iter(b'\n', body) {
            if check_line(start, &body[start..nl])? {
                dst.put_slice(&body[copied..start]);
                dst.put_u8(b'.');
                copied = start;
                extra += 1;
            }
            start = nl + 1;
        }
        if start < body.len() && check_line(start, &body[start..])? {
            dst.put_slice(&body[copied..start]);
            dst.put_u8(b'.');
            copied = start;
            extra += 1;
        }
        dst.put_slice(&body[copied..]);
        if !body.is_empty() && !body.ends_with(b"\n") {
            dst.put_slice(b"\r\n");
            extra += 2;
        }
        if body.len() + extra > limits.max_message {
            return Err(StreamError::MessageTooLarge {
                max: limits.max_message,
            });
        }
        dst.put_slice(b".\r\n");
        Ok(())
    })();
    if result.is_err() {
        dst.truncate(before);
    }
    result
}

/// One parsed status line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusLine {
    /// The code.
    pub code: ResponseCode,
    /// True for a Whois++ continuation line (`NNN-text`); more lines follow.
    pub continued: bool,
    /// The comment, without leading spaces.
    pub comment: String,
}

/// Parses one status line (without its line end): `[ "%" *SP ] 3DIGIT [ ("-" / SP) text ]`.
///
/// # Errors
/// [`StreamError::BadStatusLine`] when the shape is wrong, [`StreamError::UnknownCode`] when
/// the code is not one of the thirteen CIP codes.
pub fn parse_status_line(line: &[u8]) -> Result<StatusLine, StreamError> {
    let bad = || StreamError::BadStatusLine {
        line: String::from_utf8_lossy(line).into_owned(),
    };
    let mut rest = strip_cr(line);
    rest = trim_start(rest);
    if let Some(r) = rest.strip_prefix(b"%") {
        rest = trim_start(r);
    }
    if rest.len() < 3 || !rest[..3].iter().all(u8::is_ascii_digit) {
        return Err(bad());
    }
    let number = rest[..3]
        .iter()
        .fold(0u16, |n, d| n * 10 + u16::from(d - b'0'));
    let (continued, comment) = match rest.get(3) {
        None => (false, &rest[3..]),
        Some(b'-') => (true, &rest[4..]),
        Some(b' ' | b'\t') => (false, trim_start(&rest[3..])),
        Some(_) => return Err(bad()),
    };
    let code = ResponseCode::try_from(number).map_err(|source| StreamError::UnknownCode {
        line: String::from_utf8_lossy(line).into_owned(),
        source,
    })?;
    Ok(StatusLine {
        code,
        continued,
        comment: String::from_utf8_lossy(comment).into_owned(),
    })
}

/// Parses a version line `"#" *WSP "CIP-Version:" *WSP 1*DIGIT *WSP` (name case-insensitive).
/// Returns `None` when the line is anything else.
pub fn parse_version_line(line: &[u8]) -> Option<u32> {
    let rest = trim_start(strip_cr(line)).strip_prefix(b"#")?;
    let rest = trim_start(rest);
    const NAME: &[u8] = b"cip-version:";
    if rest.len() < NAME.len() || !rest[..NAME.len()].eq_ignore_ascii_case(NAME) {
        return None;
    }
    let digits = trim_end(trim_start(&rest[NAME.len()..]));
    if digits.is_empty() || digits.len() > 9 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(
        digits
            .iter()
            .fold(0u32, |n, d| n * 10 + u32::from(d - b'0')),
    )
}

/// The tokio-util codec for the CIP stream. Set what comes next with [`CipCodec::expect`].
#[derive(Debug, Clone)]
pub struct CipCodec {
    limits: Limits,
    expect: Expect,
    message: MessageScan,
    result: ResultScan,
    status_scanned: usize,
    continuation: Vec<String>,
}

impl CipCodec {
    /// A codec with `limits`, expecting `expect` first.
    pub fn new(limits: Limits, expect: Expect) -> Self {
        Self {
            limits,
            expect,
            message: MessageScan::default(),
            result: ResultScan::default(),
            status_scanned: 0,
            continuation: Vec::new(),
        }
    }

    /// Sets the kind of the next frame. Call only between frames.
    pub fn expect(&mut self, expect: Expect) {
        self.expect = expect;
        self.message = MessageScan::default();
        self.status_scanned = 0;
        self.continuation.clear();
    }

    /// What the codec expects next.
    pub fn expecting(&self) -> Expect {
        self.expect
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    fn decode_message(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, StreamError> {
        match scan_message(src, &mut self.message, &self.limits)? {
            Scan::Incomplete => Ok(None),
            Scan::Complete {
                body_len,
                frame_len,
                stuffed,
            } => {
                let mut frame = src.split_to(frame_len);
                frame.truncate(body_len);
                let body = if stuffed {
                    Bytes::from(unstuff(&frame))
                } else {
                    frame.freeze()
                };
                Ok(Some(Frame::Message(body)))
            }
        }
    }

    fn decode_result(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, StreamError> {
        match scan_result(src, &mut self.result, &self.limits)? {
            ResultScanned::Incomplete => Ok(None),
            done => Ok(Some(take_result(src, done))),
        }
    }

    fn decode_version(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, StreamError> {
        let Some(i) = memchr::memchr(b'\n', src) else {
            if src.len() > self.limits.max_line.saturating_add(1) {
                return Err(StreamError::LineTooLong {
                    offset: 0,
                    max: self.limits.max_line,
                });
            }
            return Ok(None);
        };
        let line = src.split_to(i + 1);
        let content = strip_cr(&line[..i]);
        if content.len() > self.limits.max_line {
            return Err(StreamError::LineTooLong {
                offset: 0,
                max: self.limits.max_line,
            });
        }
        Ok(Some(Frame::Version {
            version: parse_version_line(content),
            line: String::from_utf8_lossy(content).into_owned(),
        }))
    }

    fn decode_status(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, StreamError> {
        let mut pos = self.status_scanned;
        loop {
            let Some(i) = memchr::memchr(b'\n', &src[pos..]) else {
                if src.len() - pos > self.limits.max_line.saturating_add(1) {
                    return Err(StreamError::LineTooLong {
                        offset: pos,
                        max: self.limits.max_line,
                    });
                }
                if src.len() > self.limits.max_header {
                    return Err(StreamError::StatusTooLarge {
                        max: self.limits.max_header,
                    });
                }
                self.status_scanned = pos;
                return Ok(None);
            };
            let nl = pos + i;
            let content = strip_cr(&src[pos..nl]);
            if content.len() > self.limits.max_line {
                return Err(StreamError::LineTooLong {
                    offset: pos,
                    max: self.limits.max_line,
                });
            }
            let parsed = parse_status_line(content)?;
            pos = nl + 1;
            if pos > self.limits.max_header {
                return Err(StreamError::StatusTooLarge {
                    max: self.limits.max_header,
                });
            }
            if parsed.continued {
                self.continuation.push(parsed.comment);
                continue;
            }
            src.advance(pos);
            self.status_scanned = 0;
            return Ok(Some(Frame::Status(Status {
                code: parsed.code,
                comment: parsed.comment,
                continuation: std::mem::take(&mut self.continuation),
            })));
        }
    }
}

impl Decoder for CipCodec {
    type Item = Frame;
    type Error = StreamError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, StreamError> {
        if src.is_empty() {
            return Ok(None);
        }
        match self.expect {
            Expect::Message => self.decode_message(src),
            Expect::Result => self.decode_result(src),
            Expect::Version => self.decode_version(src),
            Expect::Status => self.decode_status(src),
        }
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, StreamError> {
        match self.decode(src)? {
            Some(frame) => Ok(Some(frame)),
            None if src.is_empty() => Ok(None),
            // ROADS closes the connection after a multipart result's close delimiter,
            // without the terminating `.`: the close delimiter ends that result.
            None if self.expect == Expect::Result => {
                match result_at_eof(src, &mut self.result, &self.limits)? {
                    Some(done) => Ok(Some(take_result(src, done))),
                    None => Err(StreamError::Truncated {
                        buffered: src.len(),
                    }),
                }
            }
            None => Err(StreamError::Truncated {
                buffered: src.len(),
            }),
        }
    }
}

impl Encoder<&Frame> for CipCodec {
    type Error = StreamError;

    fn encode(&mut self, frame: &Frame, dst: &mut BytesMut) -> Result<(), StreamError> {
        match frame {
            Frame::Version { version, .. } => {
                let v = version.unwrap_or(CIP_VERSION);
                dst.put_slice(format!("# CIP-Version: {v}\r\n").as_bytes());
                Ok(())
            }
            Frame::Status(status) => {
                encode_status(status, dst);
                Ok(())
            }
            Frame::Message(body) => encode_message(body, dst, &self.limits),
        }
    }
}

impl Encoder<Frame> for CipCodec {
    type Error = StreamError;

    fn encode(&mut self, frame: Frame, dst: &mut BytesMut) -> Result<(), StreamError> {
        <Self as Encoder<&Frame>>::encode(self, &frame, dst)
    }
}

/// Appends `% NNN-text` CRLF for each continuation line, then `% NNN text` CRLF. CR and LF
/// inside comments become spaces; an empty comment is replaced by the code's RFC text.
pub fn encode_status(status: &Status, dst: &mut BytesMut) {
    let code = status.code.code();
    for line in &status.continuation {
        dst.put_slice(format!("% {code}-").as_bytes());
        put_comment(line, dst);
        dst.put_slice(b"\r\n");
    }
    dst.put_slice(format!("% {code} ").as_bytes());
    if status.comment.is_empty() {
        dst.put_slice(status.code.text().as_bytes());
    } else {
        put_comment(&status.comment, dst);
    }
    dst.put_slice(b"\r\n");
}

fn put_comment(comment: &str, dst: &mut BytesMut) {
    for b in comment.bytes() {
        dst.put_u8(if b == b'\r' || b == b'\n' { b' ' } else { b });
    }
}

fn strip_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

fn all_periods(line: &[u8]) -> bool {
    line.iter().all(|&b| b == b'.')
}

fn trim_start(s: &[u8]) -> &[u8] {
    let n = s.iter().take_while(|b| matches!(b, b' ' | b'\t')).count();
    &s[n..]
}

fn trim_end(s: &[u8]) -> &[u8] {
    let n = s
        .iter()
        .rev()
        .take_while(|b| matches!(b, b' ' | b'\t'))
        .count();
    &s[..s.len() - n]
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn decode_all(codec: &mut CipCodec, input: &[u8]) -> Result<Vec<Frame>, StreamError> {
        let mut buf = BytesMut::from(input);
        let mut out = Vec::new();
        while let Some(f) = codec.decode_eof(&mut buf)? {
            out.push(f);
        }
        Ok(out)
    }

    fn message_codec() -> CipCodec {
        CipCodec::new(Limits::default(), Expect::Message)
    }

    #[test]
    fn stuffing_examples_from_the_digest() {
        let mut dst = BytesMut::new();
        encode_message(
            b".\r\n...\r\n.foo\r\n\r\n..\n",
            &mut dst,
            &Limits::default(),
        )
        .unwrap();
        assert_eq!(&dst[..], b"..\r\n....\r\n.foo\r\n\r\n...\n.\r\n");
        let frames = decode_all(&mut message_codec(), &dst).unwrap();
        assert_eq!(
            frames,
            [Frame::Message(Bytes::from_static(
                b".\r\n...\r\n.foo\r\n\r\n..\n"
            ))]
        );
    }

    #[test]
    fn final_line_without_newline_gets_crlf() {
        let mut dst = BytesMut::new();
        encode_message(b"abc", &mut dst, &Limits::default()).unwrap();
        assert_eq!(&dst[..], b"abc\r\n.\r\n");
        let mut dst = BytesMut::new();
        encode_message(b"", &mut dst, &Limits::default()).unwrap();
        assert_eq!(&dst[..], b".\r\n");
        let mut dst = BytesMut::new();
        encode_message(b"..", &mut dst, &Limits::default()).unwrap();
        assert_eq!(&dst[..], b"...\r\n.\r\n");
    }

    #[test]
    fn smtp_stuffed_lines_pass_unchanged() {
        let frames = decode_all(&mut message_codec(), b"..foo\r\n.\r\n").unwrap();
        assert_eq!(frames, [Frame::Message(Bytes::from_static(b"..foo\r\n"))]);
    }

    #[test]
    fn several_messages_and_bare_lf() {
        let frames = decode_all(&mut message_codec(), b"a\n.\nb\r\n.\r\n").unwrap();
        assert_eq!(
            frames,
            [
                Frame::Message(Bytes::from_static(b"a\n")),
                Frame::Message(Bytes::from_static(b"b\r\n"))
            ]
        );
    }

    #[test]
    fn split_at_every_offset() {
        let wire: &[u8] =
            b"Mime-Version: 1.0\r\nContent-Type: x/y\r\n\r\n..\r\n.foo\n...\r\n.\r\nsecond\n.\n";
        let expected = decode_all(&mut message_codec(), wire).unwrap();
        assert_eq!(expected.len(), 2);
        for cut in 0..=wire.len() {
            let mut codec = message_codec();
            let mut buf = BytesMut::new();
            let mut got = Vec::new();
            for chunk in [&wire[..cut], &wire[cut..]] {
                buf.extend_from_slice(chunk);
                while let Some(f) = codec.decode(&mut buf).unwrap() {
                    got.push(f);
                }
            }
            assert_eq!(got, expected, "cut at {cut}");
        }
        // Byte by byte, status lines with continuations.
        let status: &[u8] = b"% 220-Legacy Whois++ server\r\n% 220 Ready\r\n300 ok\n";
        let mut codec = CipCodec::new(Limits::default(), Expect::Status);
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for &b in status {
            buf.put_u8(b);
            while let Some(f) = codec.decode(&mut buf).unwrap() {
                got.push(f);
            }
        }
        assert_eq!(
            got,
            [
                Frame::Status(Status {
                    code: ResponseCode::Banner,
                    comment: "Ready".into(),
                    continuation: vec!["Legacy Whois++ server".into()],
                }),
                Frame::Status(Status::with_comment(ResponseCode::VersionAccepted, "ok")),
            ]
        );
    }

    #[test]
    fn slow_sender_is_linear() {
        // Each byte is examined a bounded number of times: the scan offset only moves forward.
        let mut state = MessageScan::default();
        let wire = b"line one\r\nline two\r\n".repeat(100);
        for end in 1..wire.len() {
            let before = state.scanned;
            assert_eq!(
                scan_message(&wire[..end], &mut state, &Limits::default()).unwrap(),
                Scan::Incomplete
            );
            assert!(state.scanned >= before && state.scanned <= end);
        }
        assert_eq!(state.scanned, wire.len() - 10);
    }

    #[test]
    fn limits_reject_before_buffering_everything() {
        let limits = Limits {
            max_line: 10,
            max_message: 50,
            ..Limits::default()
        };
        let mut codec = CipCodec::new(limits, Expect::Message);
        let mut buf = BytesMut::from(&b"0123456789ab"[..]);
        assert!(matches!(
            codec.decode(&mut buf),
            Err(StreamError::LineTooLong { max: 10, .. })
        ));
        let mut codec = CipCodec::new(limits, Expect::Message);
        let mut buf = BytesMut::from(&b"0123456789\r\n"[..]);
        assert_eq!(codec.decode(&mut buf).unwrap(), None);
        let mut codec = CipCodec::new(limits, Expect::Message);
        let mut buf = BytesMut::from(&b"0123456789\n".repeat(5)[..]);
        assert!(matches!(
            codec.decode(&mut buf),
            Err(StreamError::MessageTooLarge { max: 50 })
        ));
        // The encoder refuses the same things.
        let mut dst = BytesMut::from(&b"keep"[..]);
        assert!(encode_message(b"0123456789a\n", &mut dst, &limits).is_err());
        assert!(encode_message(&b"012345678\n".repeat(6), &mut dst, &limits).is_err());
        assert_eq!(&dst[..], b"keep");
        let mut codec = CipCodec::new(
            Limits {
                max_header: 40,
                ..limits
            },
            Expect::Status,
        );
        let mut buf = BytesMut::from(&b"220-a\n220-b\n220-c\n220-d\n220-e\n220-f\n220-g\n"[..]);
        assert!(matches!(
            codec.decode(&mut buf),
            Err(StreamError::StatusTooLarge { .. })
        ));
    }

    #[test]
    fn truncated_at_eof() {
        let mut codec = message_codec();
        let mut buf = BytesMut::from(&b"partial\r\n"[..]);
        assert!(matches!(
            codec.decode_eof(&mut buf),
            Err(StreamError::Truncated { buffered: 9 })
        ));
        assert_eq!(codec.decode_eof(&mut BytesMut::new()).unwrap(), None);
    }

    #[test]
    fn status_line_forms() {
        for (line, code, cont, comment) in [
            (&b"% 200 fine"[..], 200, false, "fine"),
            (b"%200 fine", 200, false, "fine"),
            (b"201 out", 201, false, "out"),
            (b"  %   222   bye\r", 222, false, "bye"),
            (b"% 220-Welcome", 220, true, "Welcome"),
            (b"532", 532, false, ""),
        ] {
            let s = parse_status_line(line).unwrap();
            assert_eq!(
                (s.code.code(), s.continued, s.comment.as_str()),
                (code, cont, comment)
            );
        }
        assert!(matches!(
            parse_status_line(b"% 226 legacy"),
            Err(StreamError::UnknownCode { .. })
        ));
        for bad in [&b"% 20"[..], b"hello", b"2000 x", b"", b"% 2a0"] {
            assert!(
                matches!(
                    parse_status_line(bad),
                    Err(StreamError::BadStatusLine { .. })
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn status_encoding() {
        let mut dst = BytesMut::new();
        encode_status(&Status::new(ResponseCode::VersionAccepted), &mut dst);
        encode_status(
            &Status {
                code: ResponseCode::Banner,
                comment: "a\r\nb".into(),
                continuation: vec!["x".into()],
            },
            &mut dst,
        );
        encode_status(&Status::with_comment(ResponseCode::Ok, ""), &mut dst);
        assert_eq!(
            &dst[..],
            &b"% 300 Requested CIP version accepted\r\n% 220-x\r\n% 220 a  b\r\n% 200 MIME request received and processed\r\n"[..]
        );
    }

    #[test]
    fn version_lines_and_pipelining() {
        assert_eq!(parse_version_line(b"# CIP-Version: 3"), Some(3));
        assert_eq!(parse_version_line(b"#cip-version:4 \r"), Some(4));
        assert_eq!(parse_version_line(b"Mime-Version: 1.0"), None);
        assert_eq!(parse_version_line(b"# CIP-Version: "), None);
        let mut codec = CipCodec::new(Limits::default(), Expect::Version);
        let mut buf = BytesMut::from(
            &b"# CIP-Version: 3\r\nContent-Type: application/index.cmd.noop\r\n\r\n.\r\n"[..],
        );
        assert_eq!(
            codec.decode(&mut buf).unwrap(),
            Some(Frame::version3_received())
        );
        codec.expect(Expect::Message);
        let Some(Frame::Message(m)) = codec.decode(&mut buf).unwrap() else {
            panic!("no message")
        };
        assert_eq!(&m[..], b"Content-Type: application/index.cmd.noop\r\n\r\n");
    }

    impl Frame {
        fn version3_received() -> Self {
            Self::Version {
                version: Some(3),
                line: "# CIP-Version: 3".into(),
            }
        }
    }

    fn body_strategy() -> impl Strategy<Value = Vec<u8>> {
        let line = prop_oneof![
            Just(b".".to_vec()),
            Just(b"..".to_vec()),
            Just(b"...".to_vec()),
            Just(b".foo".to_vec()),
            Just(Vec::new()),
            Just(b"\r".to_vec()),
            proptest::collection::vec(any::<u8>(), 0..20),
        ];
        let ending = prop_oneof![Just(&b"\r\n"[..]), Just(&b"\n"[..])];
        proptest::collection::vec((line, ending), 0..20).prop_map(|lines| {
            lines
                .into_iter()
                .flat_map(|(l, e)| [l, e.to_vec()].concat())
                .collect()
        })
    }

    /// The result a legacy (pre-RFC) CIPv3 server sends after `% 201`: `Content-type`
    /// before `Mime-Version`, the boundary on a continuation line, LF-only line ends in some
    /// headers, the first boundary right after the headers, an index.response part first,
    /// and a lone `.` before the close delimiter.
    pub(crate) const LEGACY_RESULT: &[u8] = b"Content-type: multipart/mixed;\r\n\
\tboundary=\"legacy-42\"\n\
Mime-Version: 1.0\n\
--legacy-42\r\n\
Content-Type: application/index.response; code=201\r\n\
\r\n\
201 Here are the results\r\n\
--legacy-42\r\n\
Content-type: application/index.obj.tagged; dsi=1.2.3.4; base-uri=\"whois://legacy.example:43\"\r\n\
\r\n\
version: x-tagged-index-1\r\n\
.\r\n\
--legacy-42--\r\n\
.\r\n";

    #[test]
    fn legacy_results_read_to_the_close_delimiter() {
        let mut codec = CipCodec::new(Limits::default(), Expect::Result);
        let frames = decode_all(&mut codec, LEGACY_RESULT).unwrap();
        let [Frame::Message(body)] = frames.as_slice() else {
            panic!("{frames:?}")
        };
        assert!(body.ends_with(b"--legacy-42--\r\n"), "{body:?}");
        assert!(
            !body.windows(5).any(|w| w == b"\r\n.\r\n"),
            "the stray period is gone"
        );
        let result =
            crate::cip::PollResult::from_mime(body, &Limits::default()).expect("a poll result");
        assert_eq!(result.objects.len(), 1);
        assert_eq!(result.objects[0].index_type.as_str(), "tagged");
        assert_eq!(&result.objects[0].payload[..], b"version: x-tagged-index-1");
        // Fed a byte at a time, the same.
        let mut codec = CipCodec::new(Limits::default(), Expect::Result);
        let mut buf = BytesMut::new();
        let mut got = None;
        for b in LEGACY_RESULT {
            buf.extend_from_slice(&[*b]);
            if let Some(f) = codec.decode(&mut buf).unwrap() {
                got = Some(f);
            }
        }
        assert_eq!(got.as_ref(), frames.first());
    }

    /// ROADS v2.3's `wppd` answering a full-type tagged poll, as recorded on loopback
    /// (banner, version answer, `% 201` line, then the result; the server then closes).
    const ROADS_POLL_ANSWER: &[u8] =
        include_bytes!("../../../integration-tests/tests/fixtures/roads/wppd-poll-full-type.s2c");

    #[test]
    fn a_roads_result_ends_at_the_close_delimiter_when_the_server_closes() {
        let mut rest = ROADS_POLL_ANSWER;
        for _ in 0..3 {
            let nl = rest.iter().position(|b| *b == b'\n').unwrap();
            rest = &rest[nl + 1..];
        }
        let mut codec = CipCodec::new(Limits::default(), Expect::Result);
        let mut buf = BytesMut::from(rest);
        assert_eq!(
            codec.decode(&mut buf).unwrap(),
            None,
            "no `.` after the close"
        );
        let Some(Frame::Message(body)) = codec.decode_eof(&mut buf).unwrap() else {
            panic!("the close delimiter ends the result at end of input")
        };
        assert!(buf.is_empty());
        assert!(body.ends_with(b"--wibblywotsit--\r\n"), "{body:?}");
        let result =
            crate::cip::PollResult::from_mime(&body, &Limits::default()).expect("a poll result");
        let [obj] = result.objects.as_slice() else {
            panic!("{:?}", result.objects)
        };
        assert_eq!(obj.index_type.as_str(), "tagged");
        assert_eq!(obj.dsi.to_string(), "1.3.6.1.4.1.1828.10.127.0.0.1.18237");
        assert_eq!(obj.base_uris, ["whoispp://127.0.0.1:18237/"]);
        // The object's header lines came straight after the part headers: they are the
        // payload's, not MIME fields.
        assert!(obj.payload.starts_with(b"version: x-tagged-index-1\r\n"));
        let tagged = crate::tagged::parse(&obj.payload).expect("the tagged object parses");
        let counts = tagged.value_counts();
        let text = format!("{counts:?}");
        assert!(text.contains("centroid"), "{text}");
        assert!(text.contains("document"), "{text}");
        // Cut short (no close delimiter yet), it is an error, not a result.
        let cut = &rest[..rest.len() / 2];
        let mut codec = CipCodec::new(Limits::default(), Expect::Result);
        let mut buf = BytesMut::from(cut);
        assert_eq!(codec.decode(&mut buf).unwrap(), None);
        assert!(matches!(
            codec.decode_eof(&mut buf),
            Err(StreamError::Truncated { .. })
        ));
    }

    #[test]
    fn a_period_not_followed_by_a_delimiter_still_ends_the_result() {
        let input =
            b"Content-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\n\r\nx\r\n.\r\nnext\r\n";
        let mut codec = CipCodec::new(Limits::default(), Expect::Result);
        let mut buf = BytesMut::from(&input[..]);
        let Some(Frame::Message(body)) = codec.decode(&mut buf).unwrap() else {
            panic!("a frame")
        };
        assert!(body.ends_with(b"x\r\n"));
        assert_eq!(&buf[..], b"next\r\n");
    }

    proptest! {
        #[test]
        fn results_of_conforming_senders_decode_as_messages(body in body_strategy()) {
            let mut wire = BytesMut::new();
            encode_message(&body, &mut wire, &Limits::default()).unwrap();
            let mut a = CipCodec::new(Limits::default(), Expect::Message);
            let mut b = CipCodec::new(Limits::default(), Expect::Result);
            let fa = decode_all(&mut a, &wire).unwrap();
            let fb = decode_all(&mut b, &wire).unwrap();
            prop_assert_eq!(fa, fb);
        }

        #[test]
        fn dot_stuffing_round_trip(body in body_strategy()) {
            let mut wire = BytesMut::new();
            encode_message(&body, &mut wire, &Limits::default()).unwrap();
            let frames = decode_all(&mut message_codec(), &wire).unwrap();
            // Bodies from the strategy end in a line feed or are empty: exact round trip.
            prop_assert_eq!(frames, vec![Frame::Message(Bytes::from(body))]);
        }

        #[test]
        fn unterminated_body_gains_only_crlf(body in proptest::collection::vec(any::<u8>(), 1..200)) {
            let mut wire = BytesMut::new();
            encode_message(&body, &mut wire, &Limits::default()).unwrap();
            let frames = decode_all(&mut message_codec(), &wire).unwrap();
            let mut expected = body.clone();
            if !body.ends_with(b"\n") {
                expected.extend_from_slice(b"\r\n");
            }
            prop_assert_eq!(frames, vec![Frame::Message(Bytes::from(expected))]);
        }

        #[test]
        fn arbitrary_input_never_panics(input in proptest::collection::vec(any::<u8>(), 0..300)) {
            for expect in [Expect::Message, Expect::Status, Expect::Version] {
                let mut codec = CipCodec::new(Limits { max_line: 40, max_message: 200, ..Limits::default() }, expect);
                let _ = decode_all(&mut codec, &input);
            }
        }
    }
}
