//! The CIP referral-mesh daemon (`cipd`) and its operators' tool (`cipctl`), as a library so
//! tests can drive every piece in-process.
//!
//! * [`ctl`]: the `cipctl` subcommands.

pub mod admin;
pub mod answers;
pub mod binding;
pub mod cip_http;
pub mod collection;
pub mod config;
pub mod conn_limit;
pub mod console;
pub mod ctl;
pub mod daemon;
pub mod feeds;
pub mod fetch;
pub mod hinadi;
pub mod http;
pub mod import;
pub mod index_types;
pub mod local;
pub mod metrics;
pub mod notify;
pub mod outbound;
pub mod peer;
pub mod rdm;
pub mod sample;
pub mod service;
pub mod soif_io;
pub mod spool;
pub mod startup;
pub mod state;
pub mod tagged;
pub mod telemetry;
pub mod transport;
pub mod trust;
