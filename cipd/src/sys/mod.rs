//! The bottom layer: process facilities that know nothing of CIP or of the rest of the
//! crate: the metrics registry ([`metrics`]), logging ([`telemetry`]), systemd
//! notification ([`notify`]), start-up progress ([`startup`]), durable file writes
//! ([`durable`]), the in-flight byte budget ([`budget`]), big buffers the allocator
//! returns promptly ([`alloc`]), file-descriptor limits
//! ([`fds`]), background threads' CPU priority ([`priority`]), TLS configurations ([`tls`]), the one HTTP client ([`http`]) and the network
//! seam a simulator plugs into ([`net`]). Imports
//! nothing from the crate but its own modules.

pub mod alloc;
pub mod budget;
pub mod durable;
pub mod fds;
pub mod http;
pub mod memory;
pub mod metrics;
pub mod net;
pub mod notify;
pub mod priority;
pub mod startup;
pub mod telemetry;
pub mod tls;

/// Locks `m`, taking the data of a poisoned lock too: a panic elsewhere mid-update of plain
/// data leaves it usable (every guarded update here is a few field writes).
pub fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
