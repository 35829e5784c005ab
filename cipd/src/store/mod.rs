//! What holds data: local collections and their sources ([`collection`], [`local`]), the
//! spool of in-bound hints ([`spool`]), the RDM change journals ([`journal`]), the answer
//! cache ([`answers`]), peer bindings ([`binding`]), and SOIF file reading ([`soif_io`]).

pub mod answers;
pub mod binding;
pub mod collection;
pub mod journal;
pub mod local;
pub mod local_index;
pub mod sample;
pub mod soif_io;
pub mod spool;
