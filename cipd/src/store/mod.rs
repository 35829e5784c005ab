//! What holds data: local collections and their sources ([`collection`], [`local`]), the
//! spool of in-bound hints ([`spool`]), the RDM change journals ([`journal`]), the answer
//! cache ([`answers`]), what the search learnt of other nodes ([`health`]), who
//! asks it ([`clients`]) and the answers it
//! keeps ([`search_cache`]), peer bindings ([`binding`]), the mesh's routes and what each poller last received
//! ([`routes`]), and SOIF file reading ([`soif_io`]).

pub mod answers;
pub mod binding;
pub mod clients;
pub mod collection;
pub mod heads;
pub mod health;
pub mod journal;
pub mod local;
pub mod local_index;
pub mod routes;
pub mod sample;
pub mod search_cache;
pub mod soif_io;
pub mod spool;
