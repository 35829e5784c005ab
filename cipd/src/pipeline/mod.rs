//! What moves data: the import queue ([`import`]), the out-bound builder ([`outbound`]),
//! pulled feeds on one schedule ([`feeds`]: Hina-Di URLs in [`hinadi_feed`], RDM pulls in
//! [`rdm_pull`], both over [`crate::sys::http`]), and the index-type registry ([`index_types`],
//! [`tagged`]), the search that chases referrals through the mesh ([`search`]), and small
//! table writes applied in batches ([`coalesce`]). A pipeline that must drive the node takes a
//! trait defined beside it.

pub mod coalesce;
pub mod feeds;
pub mod hinadi_feed;
pub mod import;
pub mod inbound;
pub mod index_types;
pub mod outbound;
pub mod rdm_pull;
pub mod search;
pub mod sources;
pub mod tagged;
