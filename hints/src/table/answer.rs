//! Borrowed answers: the referrals of one query, reading the peers' data from the table
//! snapshot they were found in.
//!
//! An [`Answer`] holds one reference to that snapshot, so that building it costs one
//! shared-count update instead of one per referral, and its values sit in one buffer. The
//! daemon serializes straight from the [`ReferralView`]s; [`Answer::into_referrals`] gives
//! owned [`Referral`]s for callers that keep them apart.

use std::sync::Arc;

use cip_proto::Dsi;

use crate::peer::PeerMeta;
use crate::rank::{PeerDsi, Referral, ValueBuf, ValueList};
use crate::table::state::Snapshot;

/// One referral of an [`Answer`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Item {
    pub slot: u32,
    pub matched_values: u32,
    pub count: u64,
    pub total: u64,
    /// For a possible referral, the threshold; `None` when definite.
    pub threshold: Option<u64>,
    /// Its values: `values[start..end]` of the answer's buffer.
    pub start: u32,
    pub end: u32,
}

/// The ranked referrals of one query (see [`crate::rank`] for the order).
#[derive(Debug, Default)]
pub struct Answer {
    snap: Option<Arc<Snapshot>>,
    items: Vec<Item>,
    values: ValueBuf,
    /// The one value every referral lists, each with its own count (an exact query's
    /// answer), when set: then the items list no values of their own. Held as a list of
    /// one (inline when short); its count is unused.
    single: Option<ValueList>,
}

impl Answer {
    /// An answer over `snap`; every item's slot must have metadata in it (items without
    /// are left out).
    pub(crate) fn new(snap: Arc<Snapshot>, mut items: Vec<Item>, values: ValueBuf) -> Self {
        items.retain(|i| snap.meta(i.slot).is_some());
        Self {
            snap: Some(snap),
            items,
            values,
            single: None,
        }
    }

    /// Makes `value` the one value of every referral (with the referral's count).
    pub(crate) fn set_single(&mut self, value: &[u8]) {
        self.single = Some(ValueList::single(value, 0));
    }

    /// The single value every referral lists, if set.
    fn single(&self) -> Option<&[u8]> {
        self.single.as_ref()?.get(0).map(|(v, _)| v)
    }

    /// Number of referrals.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// True when no peer qualified.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Referral `i` (0 is the best).
    pub fn get(&self, i: usize) -> Option<ReferralView<'_>> {
        self.view(self.items.get(i)?)
    }

    /// The referrals, best first.
    pub fn iter(&self) -> impl Iterator<Item = ReferralView<'_>> + '_ {
        // Every item has metadata (`Answer::new`), so `view` never drops one.
        self.items.iter().filter_map(move |item| self.view(item))
    }

    fn meta(&self, slot: u32) -> Option<&Arc<PeerMeta>> {
        self.snap.as_ref()?.meta(slot)
    }

    fn view<'a>(&'a self, item: &'a Item) -> Option<ReferralView<'a>> {
        Some(ReferralView {
            meta: self.meta(item.slot)?,
            item,
            values: &self.values,
            single: self.single(),
        })
    }

    /// Owned referrals, sharing one buffer of values.
    pub fn into_referrals(mut self) -> Vec<Referral> {
        let Some(snap) = self.snap.take() else {
            return Vec::new();
        };
        if let Some(value) = self.single() {
            return self
                .items
                .iter()
                .filter_map(|item| {
                    let meta = snap.meta(item.slot)?;
                    Some(owned_with(meta, item, ValueList::single(value, item.count)))
                })
                .collect();
        }
        let values = Arc::new(self.values);
        self.items
            .iter()
            .filter_map(|item| Some(owned(snap.meta(item.slot)?, item, &values)))
            .collect()
    }
}

/// The owned referral of `item` to the peer `meta`, its values in `values`.
pub(crate) fn owned(meta: &Arc<PeerMeta>, item: &Item, values: &Arc<ValueBuf>) -> Referral {
    let list = match item.end.checked_sub(item.start) {
        // One short value (the usual answer to an exact query) is kept inline.
        Some(1) => values
            .get(item.start as usize)
            .filter(|(v, _)| v.len() <= ValueList::INLINE_MAX)
            .map(|(v, c)| ValueList::single(v, c)),
        _ => None,
    };
    let list = list
        .unwrap_or_else(|| ValueList::new(values.clone(), item.start as usize..item.end as usize));
    owned_with(meta, item, list)
}

/// The owned referral of `item` to the peer `meta`, listing `values`.
fn owned_with(meta: &Arc<PeerMeta>, item: &Item, values: ValueList) -> Referral {
    Referral {
        dsi: PeerDsi::new(meta.clone()),
        count: item.count,
        total: item.total,
        definite: item.threshold.is_none(),
        threshold: item.threshold,
        values,
        matched_values: item.matched_values as usize,
    }
}

/// One referral of an [`Answer`], borrowed from it.
#[derive(Debug, Clone, Copy)]
pub struct ReferralView<'a> {
    meta: &'a Arc<PeerMeta>,
    item: &'a Item,
    values: &'a ValueBuf,
    /// The answer's single value, if it has one.
    single: Option<&'a [u8]>,
}

impl<'a> ReferralView<'a> {
    /// The dataset's DSI.
    pub fn dsi(&self) -> &'a Dsi {
        &self.meta.dsi
    }

    /// Everything the table knows about the peer.
    pub fn meta(&self) -> &'a PeerMeta {
        self.meta
    }

    /// Base-URIs to refer to.
    pub fn base_uris(&self) -> &'a [String] {
        &self.meta.base_uris
    }

    /// DSI-description, when the peer gave one.
    pub fn dsi_description(&self) -> Option<&'a str> {
        self.meta.dsi_description.as_deref()
    }

    /// Matching object count; 0 for a possible referral.
    pub fn count(&self) -> u64 {
        self.item.count
    }

    /// The peer's Total-Object-Count.
    pub fn total(&self) -> u64 {
        self.item.total
    }

    /// True when reported values matched every term.
    pub fn definite(&self) -> bool {
        self.item.threshold.is_none()
    }

    /// For a possible referral: the smallest threshold among the unmatched terms.
    pub fn threshold(&self) -> Option<u64> {
        self.item.threshold
    }

    /// How many distinct values matched in all.
    pub fn matched_values(&self) -> usize {
        self.item.matched_values as usize
    }

    /// Matched values with their counts, best first (at most
    /// [`crate::rank::QueryOptions::max_values`]).
    pub fn values(&self) -> impl ExactSizeIterator<Item = (&'a [u8], u64)> + 'a {
        let (values, single, count) = (self.values, self.single, self.item.count);
        let range = match single {
            Some(_) => 0..1,
            None => self.item.start..self.item.end,
        };
        range.map(move |i| match single {
            Some(v) => (v, count),
            None => values.get(i as usize).unwrap_or((&[], 0)),
        })
    }

    /// An owned copy.
    pub fn to_referral(&self) -> Referral {
        let values: Vec<(bytes::Bytes, u64)> = self
            .values()
            .map(|(v, c)| (bytes::Bytes::copy_from_slice(v), c))
            .collect();
        let values = match values.as_slice() {
            [(v, c)] if v.len() <= ValueList::INLINE_MAX => ValueList::single(v, *c),
            _ => ValueList::from(values),
        };
        Referral {
            dsi: PeerDsi::new(self.meta.clone()),
            count: self.item.count,
            total: self.item.total,
            definite: self.definite(),
            threshold: self.item.threshold,
            values,
            matched_values: self.matched_values(),
        }
    }
}
