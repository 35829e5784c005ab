//! Multi-node mesh tests live in `tests/`; this crate has no library code.
