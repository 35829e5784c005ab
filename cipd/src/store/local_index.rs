//! The loaded local collections and the hint built from them ([`LocalIndex`]): swapped whole
//! on each rebuild, so a reader keeps the generation it started with.

use std::sync::Arc;

use hints::hint::CipHint;
use hints::query::Query;

use crate::model::status::CollectionStatus;
use crate::store::collection::Fingerprint;
use crate::store::local::{CollectionStore, QueryError};

/// One loaded collection: its status, the fingerprint it was loaded at, and its store.
pub(crate) struct LoadedCollection {
    pub(crate) status: CollectionStatus,
    pub(crate) fingerprint: Option<Fingerprint>,
    pub(crate) store: Arc<CollectionStore>,
}

/// The local collections and the hint built from them.
pub struct LocalIndex {
    pub(crate) collections: Vec<LoadedCollection>,
    /// The local hint.
    pub hint: Arc<CipHint>,
    /// Rebuild counter.
    pub generation: u64,
}

impl LocalIndex {
    /// The store of collection `name` (an RDM catalog), if loaded.
    pub fn catalog(&self, name: &str) -> Option<Arc<CollectionStore>> {
        self.collections
            .iter()
            .find(|c| c.status.name == name)
            .map(|c| c.store.clone())
    }

    /// Every collection's status and store, in configuration order.
    pub fn collection_stores(&self) -> impl Iterator<Item = (&CollectionStatus, &CollectionStore)> {
        self.collections.iter().map(|c| (&c.status, &*c.store))
    }

    /// Every collection's store, in configuration order.
    pub fn stores(&self) -> impl Iterator<Item = &CollectionStore> {
        self.collections.iter().map(|c| &*c.store)
    }

    /// The count of local objects matching `q` and the first `want` of them (see
    /// [`crate::store::local::query`]).
    ///
    /// # Errors
    /// [`QueryError::NotIndexed`], [`QueryError::Store`].
    pub fn query(
        &self,
        q: &Query,
        want: usize,
        scan_max: usize,
    ) -> Result<crate::store::local::LocalMatches, QueryError> {
        crate::store::local::query(self.stores(), q, want, scan_max)
    }

    /// Heap bytes of the stores' offsets and indexes (an estimate).
    pub fn memory_estimate(&self) -> usize {
        self.stores().map(CollectionStore::memory_estimate).sum()
    }

    /// Per-collection status.
    pub fn collections(&self) -> Vec<CollectionStatus> {
        self.collections.iter().map(|c| c.status.clone()).collect()
    }

    /// Number of local objects.
    pub fn len(&self) -> u64 {
        self.collections.iter().map(|c| c.store.len() as u64).sum()
    }

    /// True when there are no local objects.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
