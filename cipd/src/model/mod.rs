//! The validated configuration ([`config`]), key material and signature policy ([`trust`]),
//! and the plain value types every layer above shares. Imports only [`crate::sys`].

pub mod answer;
pub mod backoff;
pub mod config;
pub mod index_kind;
pub mod routes;
pub mod status;
pub mod trust;
pub mod url;
