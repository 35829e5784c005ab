//! Which values the table's recent in-place changes touched, by generation: what lets a
//! reader that derived something from generation `g` (the out-bound aggregate) bring it to
//! the current generation at the cost of the changes, not of the table
//! (`RoutingTable::touched_since`).
//!
//! Only `RoutingTable::apply_delta` writes here. Every other write (a whole import, a
//! removal, an expiry) publishes a generation the log does not hold: a reader spanning it
//! finds a gap and starts over from the whole table. The log is bounded in values; the
//! oldest changes go first, which again only leaves a gap.

use std::collections::VecDeque;

use bytes::Bytes;

/// Most values the log holds, over all its changes.
pub(super) const MAX_LOGGED_VALUES: usize = 1 << 16;

/// The recent in-place changes: per generation, the values touched, ASCII-lowercased.
#[derive(Debug, Default)]
pub(super) struct ChangeLog {
    changes: VecDeque<(u64, Vec<Bytes>)>,
    values: usize,
}

impl ChangeLog {
    /// Records that generation `generation` touched `values` (folded).
    pub(super) fn push(&mut self, generation: u64, values: Vec<Bytes>) {
        // A generation published again (never, as the writer lock orders them) or one
        // older than the last: the log restarts from it.
        if self.changes.back().is_some_and(|(g, _)| *g >= generation) {
            self.changes.clear();
            self.values = 0;
        }
        self.values += values.len();
        self.changes.push_back((generation, values));
        while self.values > MAX_LOGGED_VALUES {
            match self.changes.pop_front() {
                Some((_, v)) => self.values -= v.len(),
                None => break,
            }
        }
    }

    /// Every value touched by generations `from + 1 ..= to`; `None` when one of them is
    /// not logged (another kind of write, or dropped for room).
    pub(super) fn since(&self, from: u64, to: u64) -> Option<Vec<Bytes>> {
        if to <= from {
            return Some(Vec::new());
        }
        let mut next = from + 1;
        let mut out = Vec::new();
        for (g, values) in &self.changes {
            if *g <= from {
                continue;
            }
            if *g > to {
                break;
            }
            if *g != next {
                return None;
            }
            out.extend(values.iter().cloned());
            next += 1;
        }
        (next == to + 1).then_some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Bytes {
        Bytes::from(s.to_owned())
    }

    #[test]
    fn contiguous_changes_are_joined_and_a_gap_is_none() {
        let mut log = ChangeLog::default();
        log.push(3, vec![v("a")]);
        log.push(4, vec![v("b"), v("c")]);
        assert_eq!(log.since(2, 4), Some(vec![v("a"), v("b"), v("c")]));
        assert_eq!(log.since(3, 4), Some(vec![v("b"), v("c")]));
        assert_eq!(log.since(4, 4), Some(Vec::new()));
        // Generation 2 is not logged; 5 neither (another kind of write).
        assert_eq!(log.since(1, 4), None);
        assert_eq!(log.since(3, 5), None);
        // A gap in the middle.
        log.push(6, vec![v("d")]);
        assert_eq!(log.since(3, 6), None);
        assert_eq!(log.since(5, 6), Some(vec![v("d")]));
    }

    #[test]
    fn the_log_is_bounded_and_loses_the_oldest() {
        let mut log = ChangeLog::default();
        let big = vec![v("x"); MAX_LOGGED_VALUES / 2 + 1];
        log.push(1, big.clone());
        log.push(2, big);
        assert_eq!(log.since(0, 2), None);
        assert!(log.since(1, 2).is_some());
        // An older generation than the last restarts the log.
        log.push(1, vec![v("y")]);
        assert_eq!(log.since(0, 1), Some(vec![v("y")]));
        assert_eq!(log.since(1, 2), None);
    }
}
