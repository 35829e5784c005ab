//! Process facilities every layer above may be handed: metrics, logging, systemd
//! notification and start-up progress. Imports only [`crate::model`].

pub mod metrics;
pub mod notify;
pub mod startup;
pub mod telemetry;
