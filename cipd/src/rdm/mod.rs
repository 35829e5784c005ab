//! RDM (Resource Description Messages) in the daemon: the server on the HTTP listener
//! ([`server`]), the catalogs' change journals behind `since` scopes ([`journal`]), and RDM
//! collections pulled from other servers or filled by submissions ([`pull`]).

pub mod journal;
pub mod pull;
pub mod server;
