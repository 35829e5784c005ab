//! A bounded journal of hint deltas (PROTOCOL.md, "The delta journal"): the recent changes
//! of a node's out-bound hints, so that a poller that missed an answer, or polls with an
//! older hint than the one last sent to it, still gets a delta, as DNS IXFR serves a zone's
//! changes since a serial from a journal (Knot keeps 20 changesets or 100 MiB).
//!
//! Changesets are kept by the [`digest`](super::digest)s they join, so one journal serves
//! every poller, whatever answer each receives: a changeset made for one poller serves the
//! next that holds the same hint. [`Journal::path`] joins the changesets from a held hint to
//! the one to send ([`HintDelta::then`]); what the bounds pushed out, or never held, has no
//! path, and the poller gets the whole hint.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use super::HintDelta;

/// How much a [`Journal`] keeps: the oldest changesets go first when either is passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JournalLimits {
    /// Changesets kept at most (0 keeps none: every poller that is not at the last answer
    /// gets the whole hint).
    pub changesets: usize,
    /// Bytes of changesets (their SOIF text) kept at most.
    pub bytes: usize,
}

impl Default for JournalLimits {
    fn default() -> Self {
        Self {
            changesets: 20,
            bytes: 16 << 20,
        }
    }
}

#[derive(Debug)]
struct Changeset {
    delta: Arc<HintDelta>,
    bytes: usize,
}

/// The recent changesets between hints, oldest first, within [`JournalLimits`].
#[derive(Debug, Default)]
pub struct Journal {
    limits: JournalLimits,
    entries: VecDeque<Changeset>,
    bytes: usize,
}

impl Journal {
    /// An empty journal.
    pub fn new(limits: JournalLimits) -> Self {
        Self {
            limits,
            entries: VecDeque::new(),
            bytes: 0,
        }
    }

    /// Changes the bounds (a reload), dropping what no longer fits.
    pub fn set_limits(&mut self, limits: JournalLimits) {
        self.limits = limits;
        self.trim();
    }

    /// Keeps `delta` (whose SOIF text is `bytes` long), unless it changes nothing or is
    /// kept already; the oldest changesets go when the bounds are passed. A changeset larger
    /// than the byte bound is not kept.
    pub fn record(&mut self, delta: Arc<HintDelta>, bytes: usize) {
        if delta.base == delta.result
            || self
                .entries
                .iter()
                .any(|c| c.delta.base == delta.base && c.delta.result == delta.result)
        {
            return;
        }
        self.bytes += bytes;
        self.entries.push_back(Changeset { delta, bytes });
        self.trim();
    }

    fn trim(&mut self) {
        while self.entries.len() > self.limits.changesets || self.bytes > self.limits.bytes {
            match self.entries.pop_front() {
                Some(c) => self.bytes -= c.bytes,
                None => break,
            }
        }
    }

    /// Whether a changeset from `base` to `result` is kept.
    pub fn has(&self, base: u64, result: u64) -> bool {
        self.entries
            .iter()
            .any(|c| c.delta.base == base && c.delta.result == result)
    }

    /// The changesets from the hint `from` to the hint `to` joined into one delta, by the
    /// fewest changesets (newest first among equals); `None` when the journal holds no way
    /// (or `from` is `to`).
    pub fn path(&self, from: u64, to: u64) -> Option<HintDelta> {
        join(&self.chain(from, to)?)
    }

    /// The changesets [`Journal::path`] joins, in order, shared: taken under a lock, joined
    /// after it.
    pub fn chain(&self, from: u64, to: u64) -> Option<Vec<Arc<HintDelta>>> {
        if from == to {
            return None;
        }
        // Breadth first from `from`; each hint reached remembers the changeset it came by.
        let mut by_base: HashMap<u64, Vec<&Arc<HintDelta>>> = HashMap::new();
        for c in self.entries.iter().rev() {
            by_base.entry(c.delta.base).or_default().push(&c.delta);
        }
        let mut came_by: HashMap<u64, &Arc<HintDelta>> = HashMap::new();
        let mut seen = HashSet::from([from]);
        let mut queue = VecDeque::from([from]);
        while let Some(at) = queue.pop_front() {
            for d in by_base.get(&at).into_iter().flatten() {
                if seen.insert(d.result) {
                    came_by.insert(d.result, d);
                    if d.result == to {
                        let mut chain = vec![Arc::clone(d)];
                        let mut back = d.base;
                        while back != from {
                            let step = came_by.get(&back)?;
                            chain.push(Arc::clone(step));
                            back = step.base;
                        }
                        chain.reverse();
                        return Some(chain);
                    }
                    queue.push_back(d.result);
                }
            }
        }
        None
    }

    /// Changesets kept.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when it keeps none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Bytes of the changesets kept.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

/// `chain` joined into one delta ([`HintDelta::then`]); `None` when it is empty or a
/// changeset does not start where the one before ends.
pub fn join(chain: &[Arc<HintDelta>]) -> Option<HintDelta> {
    let (first, rest) = chain.split_first()?;
    rest.iter()
        .try_fold((**first).clone(), |acc, d| acc.then(d))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delta::digest;
    use crate::hint::{AttrSpec, CipHint, WeightEntry, Weightlist};
    use bytes::Bytes;

    fn hint(values: &[(&str, u64)], date: &str) -> CipHint {
        let spec = AttrSpec::parse("DOCUMENT:Author").unwrap();
        CipHint {
            url: "cip://n1.example/".into(),
            total_object_count: values.iter().map(|(_, c)| c).sum(),
            date: Some(date.to_owned()),
            attributes: vec![spec.clone()],
            weightlists: vec![(
                spec,
                Weightlist::new(
                    values
                        .iter()
                        .map(|(v, c)| WeightEntry {
                            value: Bytes::from(v.to_string()),
                            count: *c,
                        })
                        .collect(),
                ),
            )],
            ..CipHint::default()
        }
    }

    fn chain() -> Vec<CipHint> {
        vec![
            hint(&[("Garcia", 3)], "Mon, 01 Jan 2024 00:00:00 GMT"),
            hint(
                &[("Garcia", 3), ("Okafor", 1)],
                "Tue, 02 Jan 2024 00:00:00 GMT",
            ),
            hint(
                &[("Garcia", 2), ("Okafor", 1)],
                "Wed, 03 Jan 2024 00:00:00 GMT",
            ),
            hint(
                &[("Okafor", 1), ("Smith", 5)],
                "Thu, 04 Jan 2024 00:00:00 GMT",
            ),
        ]
    }

    fn recorded(hints: &[CipHint], limits: JournalLimits) -> Journal {
        let mut j = Journal::new(limits);
        for w in hints.windows(2) {
            let d = HintDelta::between(&w[0], &w[1]).unwrap();
            let bytes = d.to_soif().to_bytes().len();
            j.record(Arc::new(d), bytes);
        }
        j
    }

    #[test]
    fn a_poller_two_answers_behind_gets_both_changes_as_one() {
        let hints = chain();
        let j = recorded(&hints, JournalLimits::default());
        assert_eq!(j.len(), 3);
        let d = j.path(digest(&hints[0]), digest(&hints[3])).unwrap();
        let made = d.apply(&hints[0]).unwrap();
        assert_eq!(digest(&made), digest(&hints[3]));
        assert_eq!(made.date.as_deref(), hints[3].date.as_deref());
        // From the middle too, and never backwards or to itself.
        assert!(j.path(digest(&hints[1]), digest(&hints[3])).is_some());
        assert!(j.path(digest(&hints[3]), digest(&hints[0])).is_none());
        assert!(j.path(digest(&hints[2]), digest(&hints[2])).is_none());
    }

    #[test]
    fn the_bounds_push_the_oldest_changesets_out() {
        let hints = chain();
        let two = recorded(
            &hints,
            JournalLimits {
                changesets: 2,
                bytes: 1 << 20,
            },
        );
        assert_eq!(two.len(), 2);
        assert!(two.path(digest(&hints[0]), digest(&hints[3])).is_none());
        assert!(two.path(digest(&hints[1]), digest(&hints[3])).is_some());
        let small = recorded(
            &hints,
            JournalLimits {
                changesets: 20,
                bytes: 1,
            },
        );
        assert!(small.is_empty());
        assert_eq!(small.bytes(), 0);
        let mut none = recorded(&hints, JournalLimits::default());
        none.set_limits(JournalLimits {
            changesets: 0,
            bytes: 1 << 20,
        });
        assert!(none.is_empty());
    }

    #[test]
    fn a_hint_that_comes_back_takes_the_shortest_way() {
        // 0 -> 1 -> 0 -> 1 -> 2: from 0 the journal goes 0 -> 1 -> 2, never round the loop.
        let hints = chain();
        let order = [0, 1, 0, 1, 2];
        let mut j = Journal::new(JournalLimits::default());
        for w in order.windows(2) {
            let d = HintDelta::between(&hints[w[0]], &hints[w[1]]).unwrap();
            j.record(Arc::new(d), 100);
        }
        assert_eq!(j.len(), 3, "a changeset kept once");
        let d = j.path(digest(&hints[0]), digest(&hints[2])).unwrap();
        assert_eq!(digest(&d.apply(&hints[0]).unwrap()), digest(&hints[2]));
        assert!(j.has(digest(&hints[1]), digest(&hints[0])));
    }
}
