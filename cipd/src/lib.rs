//! The CIP referral-mesh daemon (`cipd`) and its operators' tool (`cipctl`), as a library so
//! tests can drive every piece in-process.
//!
//! The modules are layers; each imports only from the layers below it (`ARCHITECTURE.md`
//! draws them, and `tests/layers.rs` keeps them so):
//!
//! * [`ctl`]: the `cipctl` subcommands (with `main.rs` and `bin/`, the binaries).
//! * [`daemon`]: wiring: builds the node, binds the listeners, runs the peer supervisor and
//!   the background tasks, owns shutdown.
//! * [`front`]: the front-ends: the CIP stream service, the HTTP router and
//!   its routes (queries, CIP over HTTP, RDM, `/hina.di`, console, metrics), the admin socket.
//! * [`node`]: [`node::Node`], the node's shared state and the operations the front-ends ask
//!   of it.
//! * [`pipeline`]: what moves data: the import queue, the out-bound builder, pulled feeds
//!   (Hina-Di URLs, RDM pulls), the index-type registry.
//! * [`transport`]: CIP's transports, both roles of the stream (with TLS) and the sender of
//!   CIP over HTTP: the front-ends serve through it, the peer tasks connect through it.
//! * [`store`]: what holds data: local collections and their sources, the spool, the RDM
//!   journals, the answer cache, peer bindings, and durable file writes.
//! * [`sys`]: process facilities: metrics, logging, systemd notification, start-up progress.
//! * [`model`]: the validated configuration, key material and plain value types; no I/O
//!   beyond reading the files it is pointed at.

// Outside tests, a failure is an error or a justified `expect`: never a bare unwrap.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod ctl;
pub mod daemon;
pub mod front;
pub mod model;
pub mod node;
pub mod pipeline;
pub mod store;
pub mod sys;
pub mod transport;
