//! What a hint will be charged against the table's memory budgets, read from its SOIF bytes
//! as they arrive ([`ChargeScanner`]), so that a hint over a peer's budget is refused
//! before it is all in memory.

use super::config::ENTRY_BUDGET_BYTES;

/// Most a byte of SOIF can add to [`ChargeScanner::largest`]: an entry takes at least three
/// bytes (`;`, a digit, `,`) and counts its value's bytes plus [`ENTRY_BUDGET_BYTES`], at
/// most 73 / 3 + 1 a byte. So a stream of `n` bytes counts at most `n` times this, and one
/// whose budget is above that need not be scanned yet.
pub const MAX_CHARGE_PER_BYTE: u64 = 25;

/// Longest line start read as a possible attribute name (`Name{size}:`); a longer one is
/// not an attribute line of any hint cipd takes.
const MAX_NAME_LINE: usize = 512;

/// Reads SOIF bytes in pieces, as they arrive, and keeps a lower bound of what each object's
/// weightlist entries are charged against the routing table's memory budget
/// ([`super::budget_bytes`]: each entry its value's bytes plus [`ENTRY_BUDGET_BYTES`]).
///
/// It follows SOIF's framing: an attribute line `Name{size}:<TAB>` is followed by exactly
/// `size` value bytes, so nothing inside a value is taken for framing. Inside a weightlist
/// value (`Weightlist-...`), each entry `value;count` counts [`ENTRY_BUDGET_BYTES`] plus its
/// value's bytes that are not white space or escapes, at most what the table charges it. Other
/// bytes (MIME headers and boundaries around the objects, other attributes) count nothing,
/// and an object (`@Template {`) starts its own count. Any input is read without error,
/// in memory bounded by [`MAX_NAME_LINE`].
#[derive(Debug, Clone, Default)]
pub struct ChargeScanner {
    state: State,
    /// The current line's first bytes, while they may be an attribute's name and size.
    line: Vec<u8>,
    /// Value bytes left of the current attribute.
    left: u64,
    /// The current value is a weightlist.
    weightlist: bool,
    /// Inside a weightlist: the entry's value bytes up to its last `;` so far.
    last_semi: Option<u64>,
    /// Inside a weightlist: the next byte is escaped.
    escaped: bool,
    /// Inside a weightlist: bytes of the current entry that count (not spaces, not
    /// escapes).
    value_bytes: u64,
    /// The current object's charge so far.
    object: u64,
    /// The largest object's charge so far.
    largest: u64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum State {
    /// At the start of a line.
    #[default]
    LineStart,
    /// Reading a line that may be an attribute's `Name{size}:`.
    Name,
    /// After `Name{size}:`, expecting the tab.
    Tab,
    /// Inside a value.
    Value,
    /// Skipping to the end of a line that is no attribute.
    SkipLine,
}

impl ChargeScanner {
    /// A scanner at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// The largest charge of one object read so far (a lower bound of its charge).
    pub fn largest(&self) -> u64 {
        self.largest.max(self.object)
    }

    /// Reads the next bytes of the stream.
    pub fn feed(&mut self, mut bytes: &[u8]) {
        while let Some((&b, rest)) = bytes.split_first() {
            match self.state {
                State::Value => {
                    let n = usize::try_from(self.left)
                        .unwrap_or(usize::MAX)
                        .min(bytes.len());
                    let (value, rest) = bytes.split_at(n);
                    if self.weightlist {
                        self.entries(value);
                    }
                    self.left -= n as u64;
                    bytes = rest;
                    if self.left == 0 {
                        self.end_value();
                    }
                    continue;
                }
                State::LineStart => {
                    self.line.clear();
                    if b == b'@' {
                        // A new object.
                        self.largest = self.largest.max(self.object);
                        self.object = 0;
                        self.state = State::SkipLine;
                    } else if b == b'\n' {
                    } else {
                        self.line.push(b);
                        self.state = State::Name;
                    }
                }
                State::Name => {
                    if b == b'\n' {
                        self.state = State::LineStart;
                    } else if b == b':' && self.line.last() == Some(&b'}') {
                        self.state = match attribute(&self.line) {
                            Some((size, weightlist)) => {
                                self.left = size;
                                self.weightlist = weightlist;
                                State::Tab
                            }
                            None => State::SkipLine,
                        };
                    } else if self.line.len() >= MAX_NAME_LINE {
                        self.state = State::SkipLine;
                    } else {
                        self.line.push(b);
                    }
                }
                State::Tab => {
                    if b == b'\t' {
                        self.last_semi = None;
                        self.escaped = false;
                        self.value_bytes = 0;
                        if self.left == 0 {
                            self.end_value();
                        } else {
                            self.state = State::Value;
                        }
                    } else {
                        self.state = if b == b'\n' {
                            State::LineStart
                        } else {
                            State::SkipLine
                        };
                    }
                }
                State::SkipLine => {
                    if b == b'\n' {
                        self.state = State::LineStart;
                    }
                }
            }
            bytes = rest;
        }
    }

    /// The end of a value: what follows starts a line; a weightlist's last entry ends.
    fn end_value(&mut self) {
        if self.weightlist {
            self.end_entry();
        }
        self.state = State::LineStart;
    }

    /// Counts the entries in a piece of a weightlist's value (the weightlist syntax of
    /// `crate::weightlist`: entries end at an unescaped `,`, the count follows the entry's
    /// last unescaped `;`).
    fn entries(&mut self, mut value: &[u8]) {
        while let Some((&first, rest)) = value.split_first() {
            if self.escaped {
                self.escaped = false;
                if !first.is_ascii_whitespace() {
                    self.value_bytes += 1;
                }
                value = rest;
                continue;
            }
            // Runs of ordinary bytes at once: the stream is read at memory speed.
            let Some(i) = memchr::memchr3(b'\\', b';', b',', value) else {
                self.value_bytes += not_space(value);
                return;
            };
            self.value_bytes += not_space(&value[..i]);
            match value[i] {
                b'\\' => self.escaped = true,
                b';' => {
                    // An earlier `;` was the value's.
                    self.last_semi = Some(self.value_bytes);
                    self.value_bytes += 1;
                }
                _ => self.end_entry(),
            }
            value = &value[i + 1..];
        }
    }

    /// An entry ended: charged when it had a count.
    fn end_entry(&mut self) {
        if let Some(value) = self.last_semi.take() {
            self.object = self
                .object
                .saturating_add(ENTRY_BUDGET_BYTES.saturating_add(value));
        }
        self.value_bytes = 0;
    }
}

/// Bytes of `run` that are not white space.
fn not_space(run: &[u8]) -> u64 {
    (run.len() - run.iter().filter(|b| b.is_ascii_whitespace()).count()) as u64
}

/// The size of an attribute line's value and whether it is a weightlist, from the line's
/// start up to its `}` (`Name{size}`); `None` when it is not one.
fn attribute(line: &[u8]) -> Option<(u64, bool)> {
    let open = line.iter().position(|&b| b == b'{')?;
    let (name, size) = (&line[..open], &line[open + 1..line.len() - 1]);
    if name.is_empty() || size.is_empty() || !size.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let size = std::str::from_utf8(size).ok()?.parse().ok()?;
    let prefix = b"weightlist-";
    let weightlist = name.len() > prefix.len() && name[..prefix.len()].eq_ignore_ascii_case(prefix);
    Some((size, weightlist))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hint::{AttrSpec, CipHint, WeightEntry, Weightlist};
    use bytes::Bytes;
    use proptest::prelude::*;

    fn hint(values: &[(String, u64)]) -> CipHint {
        let spec = AttrSpec::new("DOCUMENT", "Author").unwrap();
        let mut h =
            CipHint::with_weightlist(spec, 1_000, values.iter().map(|(v, c)| (v.as_str(), *c)));
        h.weightlists.push((
            AttrSpec::new("DOCUMENT", "Title").unwrap(),
            Weightlist::new(vec![WeightEntry {
                value: Bytes::from_static(b"a title; with, marks"),
                count: 2,
            }]),
        ));
        h
    }

    fn scanned(bytes: &[u8], piece: usize) -> u64 {
        let mut s = ChargeScanner::new();
        for chunk in bytes.chunks(piece.max(1)) {
            s.feed(chunk);
        }
        s.largest()
    }

    #[test]
    fn ordinary_values_are_charged_what_the_table_charges() {
        let values: Vec<(String, u64)> = (0..500).map(|i| (format!("Author{i}"), 1)).collect();
        let h = hint(&values);
        let bytes = h.to_soif().to_bytes();
        let charge = crate::table::budget_bytes(&h);
        // "a title; with, marks" counts its bytes but the spaces.
        let spaces = 3;
        for piece in [1, 7, 4096, bytes.len()] {
            assert_eq!(scanned(&bytes, piece), charge - spaces, "pieces of {piece}");
        }
    }

    #[test]
    fn each_object_is_counted_apart_and_mime_around_counts_nothing() {
        let small = hint(&[("a".into(), 1)]).to_soif().to_bytes();
        let values: Vec<(String, u64)> = (0..50).map(|i| (format!("v{i}"), 1)).collect();
        let big_hint = hint(&values);
        let big = big_hint.to_soif().to_bytes();
        let mut stream = b"Content-Type: multipart/mixed; boundary=x{1}:\t\n\n--x\nContent-Type: application/index.obj.HARVEST-SOIF-1\n\n".to_vec();
        stream.extend_from_slice(&small);
        stream.extend_from_slice(b"\n--x\n\n");
        stream.extend_from_slice(&big);
        stream.extend_from_slice(b"\n--x--\n");
        let expect = crate::table::budget_bytes(&big_hint) - 3;
        assert_eq!(scanned(&stream, 5), expect);
    }

    #[test]
    fn a_byte_counts_at_most_max_charge_per_byte() {
        // The densest weightlist: empty values, one-digit counts.
        let list = ";1,".repeat(1000);
        let soif = format!(
            "@CIP-HINT {{ -\nWeightlist-[DOCUMENT:Author]{{{}}}:\t{list}\n}}\n",
            list.len()
        );
        let counted = scanned(soif.as_bytes(), 7);
        assert_eq!(counted, 1000 * ENTRY_BUDGET_BYTES);
        assert!(counted <= soif.len() as u64 * MAX_CHARGE_PER_BYTE);
    }

    proptest! {
        /// Never more than the table charges, whatever the values and however the bytes
        /// are cut; and never a panic on any bytes.
        #[test]
        fn never_above_the_table_s_charge(
            values in prop::collection::btree_map("[ a-c,;\\\\{}:@\\t\\né]{1,12}", 1u64..1_000_000, 0..40),
            piece in 1usize..64,
        ) {
            let values: Vec<(String, u64)> = values.into_iter().collect();
            let h = hint(&values);
            let bytes = h.to_soif().to_bytes();
            let counted = scanned(&bytes, piece);
            prop_assert!(counted <= crate::table::budget_bytes(&h));
            prop_assert!(counted <= bytes.len() as u64 * MAX_CHARGE_PER_BYTE);
        }

        #[test]
        fn any_bytes_are_read(bytes in prop::collection::vec(any::<u8>(), 0..2000), piece in 1usize..64) {
            scanned(&bytes, piece);
        }
    }
}
