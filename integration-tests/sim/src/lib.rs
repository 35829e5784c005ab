//! The deterministic mesh simulation ([`sim`]) that the `cipd-sim` tool and the
//! integration tests' simulation tests run, and the same mesh run for real as processes in
//! network namespaces ([`real`]) to check it against. The multi-node mesh tests live in the
//! `integration-tests` crate beside this one.

// Outside tests, a failure is an error or a justified `expect`: never a bare unwrap.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod real;
pub mod sim;
