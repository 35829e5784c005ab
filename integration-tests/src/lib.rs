//! Multi-node mesh tests live in `tests/`; the library holds the deterministic mesh
//! simulation ([`sim`]) that the `cipd-sim` tool and the simulation tests run, and the same
//! mesh run for real as processes in network namespaces ([`real`]) to check it against.

pub mod real;
pub mod sim;
