//! What moves data: the import queue ([`import`]), the out-bound builder ([`outbound`]),
//! pulled feeds on one schedule ([`feeds`]: Hina-Di URLs in [`hinadi_feed`], RDM pulls in
//! [`rdm_pull`], both over [`crate::sys::http`]), and the index-type registry ([`index_types`],
//! [`tagged`]), and the search that chases referrals through the mesh ([`search`]). A pipeline that must drive the node takes a trait defined beside it.

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
