//! The bottom layer: the validated configuration ([`config`]), key material and signature
//! policy ([`trust`]), and the plain value types every layer above shares. Nothing here
//! imports from the rest of the crate.

pub mod config;
pub mod trust;
