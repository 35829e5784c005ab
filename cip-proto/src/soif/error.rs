//! SOIF parse errors: every one carries the byte offset where the input went wrong.

use std::fmt;
use std::io;

/// A SOIF error at an absolute byte offset of the input stream.
#[derive(Debug, thiserror::Error)]
#[error("byte {offset}: {kind}")]
pub struct SoifError {
    offset: u64,
    #[source]
    kind: SoifErrorKind,
}

impl SoifError {
    /// An error of `kind` at `offset`.
    pub fn new(offset: u64, kind: SoifErrorKind) -> Self {
        Self { offset, kind }
    }

    /// Absolute byte offset in the input where the problem was found.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// What went wrong.
    pub fn kind(&self) -> &SoifErrorKind {
        &self.kind
    }

    /// The same error in a stream where the scanned slice starts `by` bytes in: every
    /// offset it carries made absolute.
    pub(crate) fn shifted(mut self, by: u64) -> Self {
        self.offset += by;
        if let SoifErrorKind::UnexpectedEof { object_start, .. } = &mut self.kind {
            *object_start += by;
        }
        self
    }
}

impl From<io::Error> for SoifError {
    fn from(e: io::Error) -> Self {
        Self::new(0, SoifErrorKind::Io(e))
    }
}

/// Shows a byte as a readable token in messages.
pub(crate) struct ByteDisplay(pub Option<u8>);

impl fmt::Display for ByteDisplay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            None => f.write_str("end of input"),
            Some(b'\t') => f.write_str("TAB"),
            Some(b'\n') => f.write_str("LF"),
            Some(b'\r') => f.write_str("CR"),
            Some(b' ') => f.write_str("SPACE"),
            Some(b) if b.is_ascii_graphic() => write!(f, "'{}'", b as char),
            Some(b) => write!(f, "byte 0x{b:02x}"),
        }
    }
}

/// The kinds of SOIF error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SoifErrorKind {
    /// Something other than whitespace where an object must start.
    #[error("expected '@' to start an object, found {}", ByteDisplay(Some(*found)))]
    GarbageBeforeObject {
        /// The byte found.
        found: u8,
    },
    /// `@` not followed by a template type.
    #[error("expected a template type after '@', found {}", ByteDisplay(*found))]
    MissingTemplate {
        /// The byte found, if any.
        found: Option<u8>,
    },
    /// No `{` after the template type.
    #[error("expected '{{' after template type, found {}", ByteDisplay(*found))]
    ExpectedOpenBrace {
        /// The byte found, if any.
        found: Option<u8>,
    },
    /// No URL (or `-`) after the object's `{`.
    #[error("expected a URL or '-' after '{{', found {}", ByteDisplay(*found))]
    MissingUrl {
        /// The byte found, if any.
        found: Option<u8>,
    },
    /// A URL given to the writer holds a byte that would end it early.
    #[error("URL may not contain {}", ByteDisplay(Some(*found)))]
    InvalidUrl {
        /// The offending byte.
        found: u8,
    },
    /// An identifier given to the writer is empty or holds a byte outside the alphabet.
    #[error("invalid identifier: {}", match found {
        None => "empty".to_owned(),
        Some(b) => format!("{} is not allowed", ByteDisplay(Some(*b))),
    })]
    InvalidIdentifier {
        /// The offending byte; `None` when empty.
        found: Option<u8>,
    },
    /// Where an attribute identifier or the closing `}` must be.
    #[error("expected an attribute identifier or '}}', found {}", ByteDisplay(*found))]
    ExpectedAttribute {
        /// The byte found, if any.
        found: Option<u8>,
    },
    /// An identifier not followed by `{SIZE}`.
    #[error("expected '{{' and a value size after attribute {name:?}, found {}", ByteDisplay(*found))]
    ExpectedSize {
        /// The identifier read so far.
        name: String,
        /// The byte found, if any.
        found: Option<u8>,
    },
    /// A non-digit inside `{SIZE}`.
    #[error("non-numeric value size for attribute {name:?}: found {} where a digit or '}}' belongs", ByteDisplay(*found))]
    NonNumericSize {
        /// The attribute identifier.
        name: String,
        /// The byte found, if any.
        found: Option<u8>,
    },
    /// `{}` with no digits.
    #[error("empty value size for attribute {name:?}")]
    EmptySize {
        /// The attribute identifier.
        name: String,
    },
    /// A size that does not fit in 64 bits.
    #[error("value size for attribute {name:?} overflows")]
    SizeOverflow {
        /// The attribute identifier.
        name: String,
    },
    /// No `:<TAB>` after `{SIZE}`.
    #[error("expected ':<TAB>' after {name}{{{size}}}, found {}{}", ByteDisplay(*found),
        if name.ends_with(':') { " (the identifier ends in ':'; the delimiter belongs after the size)" } else { "" })]
    MissingDelimiter {
        /// The attribute identifier.
        name: String,
        /// The declared size.
        size: u64,
        /// The byte found, if any.
        found: Option<u8>,
    },
    /// A value's declared size runs past the end of the input.
    #[error("value of attribute {name:?} is declared as {size} bytes but only {available} remain")]
    SizePastEnd {
        /// The attribute identifier.
        name: String,
        /// The declared size.
        size: u64,
        /// Bytes left in the input after the delimiter.
        available: u64,
    },
    /// The input ended inside an object.
    #[error(
        "unexpected end of input inside the object that starts at byte {object_start}: expected {expected}"
    )]
    UnexpectedEof {
        /// Offset of the object's `@`.
        object_start: u64,
        /// What the parser was looking for.
        expected: &'static str,
    },
    /// A value larger than [`super::Limits::max_value_size`].
    #[error("value of attribute {name:?} is {size} bytes, over the limit of {max}")]
    ValueTooLarge {
        /// The attribute identifier.
        name: String,
        /// The declared size.
        size: u64,
        /// The configured limit.
        max: usize,
    },
    /// More pairs than [`super::Limits::max_attributes`].
    #[error("object has more than {max} attributes")]
    TooManyAttributes {
        /// The configured limit.
        max: usize,
    },
    /// An object larger than [`super::Limits::max_object_size`].
    #[error("object is larger than the limit of {max} bytes")]
    ObjectTooLarge {
        /// The configured limit.
        max: usize,
    },
    /// A template type, identifier or URL longer than [`super::Limits::max_token_len`].
    #[error("{what} is longer than the limit of {max} bytes")]
    TokenTooLong {
        /// Which token.
        what: &'static str,
        /// The configured limit.
        max: usize,
    },
    /// Reading the input failed.
    #[error("read error: {0}")]
    Io(#[from] io::Error),
}
