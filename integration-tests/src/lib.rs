//! Multi-node mesh tests live in `tests/`; the library holds the deterministic mesh
//! simulation ([`sim`]) that the `cipd-sim` tool and the simulation tests run.

pub mod sim;
