//! Tokio filesystem shims.

pub mod fs;
