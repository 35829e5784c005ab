//! Dataset identifiers (RFC 2652 §2.1.2).
//!
//! A DSI is an OID in dotted-decimal form with no leading zeros, at most 255 characters.
//! Because the form is canonical, two DSIs are equal exactly when their strings are equal.

use std::fmt;
use std::str::FromStr;

/// Longest DSI the RFC allows, in characters.
pub const MAX_DSI_LEN: usize = 255;

/// A validated dataset identifier.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Dsi(String);

/// Why a string is not a valid DSI; `offset` points at the offending character.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DsiError {
    /// The string is empty.
    #[error("empty dsi")]
    Empty,
    /// Longer than [`MAX_DSI_LEN`].
    #[error("dsi is {len} characters long, the limit is {MAX_DSI_LEN}")]
    TooLong {
        /// Length of the rejected string.
        len: usize,
    },
    /// A character other than a digit or a dot, or a misplaced dot.
    #[error("invalid character {found:?} in dsi at offset {offset}; expected a digit")]
    InvalidChar {
        /// Byte offset of the character.
        offset: usize,
        /// The character found.
        found: char,
    },
    /// An arc with a leading zero (`1.02`).
    #[error("arc with a leading zero in dsi at offset {offset}")]
    LeadingZero {
        /// Byte offset of the zero.
        offset: usize,
    },
}

impl Dsi {
    /// Validates `s` against the DSI ABNF (`integer *("." integer)`, no leading zeros).
    ///
    /// # Errors
    /// [`DsiError`] naming the first offending character.
    pub fn new(s: &str) -> Result<Self, DsiError> {
        validate(s)?;
        Ok(Self(s.to_owned()))
    }

    /// The DSI as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

fn validate(s: &str) -> Result<(), DsiError> {
    if s.is_empty() {
        return Err(DsiError::Empty);
    }
    if s.len() > MAX_DSI_LEN {
        return Err(DsiError::TooLong { len: s.len() });
    }
    for (i, arc) in split_offsets(s) {
        if arc.is_empty() {
            let found = s[i..].chars().next().unwrap_or('.');
            // An empty arc is either a leading/trailing dot or two dots in a row.
            return Err(DsiError::InvalidChar {
                offset: i.min(s.len() - 1),
                found,
            });
        }
        if let Some((j, c)) = arc.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
            return Err(DsiError::InvalidChar {
                offset: i + j,
                found: c,
            });
        }
        if arc.len() > 1 && arc.starts_with('0') {
            return Err(DsiError::LeadingZero { offset: i });
        }
    }
    Ok(())
}

fn split_offsets(s: &str) -> impl Iterator<Item = (usize, &str)> {
    let mut start = 0;
    s.split('.').map(move |arc| {
        let at = start;
        start += arc.len() + 1;
        (at, arc)
    })
}

impl FromStr for Dsi {
    type Err = DsiError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::new(s)
    }
}

impl fmt::Display for Dsi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for Dsi {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_valid() {
        for s in ["0", "1", "1.3.6.1.4.1.99999.7", "1.0.2", "10.200"] {
            assert_eq!(Dsi::new(s).unwrap().as_str(), s);
        }
    }

    #[test]
    fn rejects_invalid() {
        assert_eq!(Dsi::new(""), Err(DsiError::Empty));
        assert_eq!(Dsi::new("1.02"), Err(DsiError::LeadingZero { offset: 2 }));
        assert_eq!(
            Dsi::new("1.a"),
            Err(DsiError::InvalidChar {
                offset: 2,
                found: 'a'
            })
        );
        assert!(matches!(
            Dsi::new("1..2"),
            Err(DsiError::InvalidChar { .. })
        ));
        assert!(matches!(
            Dsi::new(".1"),
            Err(DsiError::InvalidChar { offset: 0, .. })
        ));
        assert!(matches!(Dsi::new("1."), Err(DsiError::InvalidChar { .. })));
        let long = vec!["1"; 200].join(".");
        assert!(matches!(Dsi::new(&long), Err(DsiError::TooLong { .. })));
    }
}
