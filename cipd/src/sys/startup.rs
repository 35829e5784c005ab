//! Progress of a long start (spool restore, collection loads), for `cipctl status`, the
//! log and systemd's status line.
//!
//! The admin socket is served before the spool is restored, so an operator can watch a
//! start that takes minutes: `cipctl status` shows the phase, how far it is and for how long
//! it has run; the log has a line every few seconds; a systemd unit's status shows the same.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// How often a running phase is logged.
pub const LOG_EVERY: Duration = Duration::from_secs(5);

/// The start's progress, shared by the starting code and its observers.
#[derive(Debug, Default)]
pub struct Startup {
    phase: Mutex<Option<Phase>>,
    done: AtomicU64,
}

#[derive(Debug, Clone)]
struct Phase {
    name: &'static str,
    unit: &'static str,
    total: u64,
    started: Instant,
}

/// A snapshot of the running phase.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StartupProgress {
    /// What is being done (`restoring the spool`, `loading collections`).
    pub phase: String,
    /// How much is done.
    pub done: u64,
    /// Of how much (0 when not known in advance).
    pub total: u64,
    /// What `done` counts (`hints`, `bytes`).
    pub unit: String,
    /// Seconds the phase has run.
    pub elapsed_seconds: f64,
}

impl std::fmt::Display for StartupProgress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.phase, self.done)?;
        if self.total > 0 {
            write!(f, " of {}", self.total)?;
        }
        write!(f, " {} ({:.1} s)", self.unit, self.elapsed_seconds)
    }
}

impl Startup {
    /// Starts a phase counting `unit`s up to `total` (0: unknown).
    pub fn begin(&self, name: &'static str, unit: &'static str, total: u64) {
        self.done.store(0, Ordering::Relaxed);
        *self.lock() = Some(Phase {
            name,
            unit,
            total,
            started: Instant::now(),
        });
        tracing::info!(phase = name, total, unit, "starting");
    }

    /// Counts `n` more units done.
    pub fn advance(&self, n: u64) {
        self.done.fetch_add(n, Ordering::Relaxed);
    }

    /// Sets the units done.
    pub fn set_done(&self, n: u64) {
        self.done.store(n, Ordering::Relaxed);
    }

    /// Ends the running phase, logging how long it took.
    pub fn finish(&self) {
        if let Some(p) = self.lock().take() {
            tracing::info!(
                phase = p.name,
                done = self.done.load(Ordering::Relaxed),
                unit = p.unit,
                elapsed_ms = p.started.elapsed().as_millis() as u64,
                "done"
            );
        }
    }

    /// The running phase, if any.
    pub fn snapshot(&self) -> Option<StartupProgress> {
        let phase = self.lock().clone()?;
        Some(StartupProgress {
            phase: phase.name.to_owned(),
            done: self.done.load(Ordering::Relaxed),
            total: phase.total,
            unit: phase.unit.to_owned(),
            elapsed_seconds: phase.started.elapsed().as_secs_f64(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Phase>> {
        super::lock(&self.phase)
    }
}

/// Logs the running phase every [`LOG_EVERY`] (and tells systemd) until `done` resolves.
pub async fn report_while<F: std::future::Future>(startup: &Startup, done: F) -> F::Output {
    let mut done = std::pin::pin!(done);
    let mut tick = tokio::time::interval(LOG_EVERY);
    tick.tick().await;
    loop {
        tokio::select! {
            out = &mut done => return out,
            _ = tick.tick() => {
                if let Some(p) = startup.snapshot() {
                    tracing::info!(progress = %p, "still starting");
                    crate::sys::notify::status(&format!("starting: {p}"));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_report_progress_and_end() {
        let s = Startup::default();
        assert!(s.snapshot().is_none());
        s.begin("restoring the spool", "hints", 10);
        s.advance(3);
        s.advance(2);
        let p = s.snapshot().unwrap();
        assert_eq!((p.done, p.total), (5, 10));
        assert!(
            p.to_string()
                .starts_with("restoring the spool: 5 of 10 hints ("),
            "{p}"
        );
        s.begin("loading collections", "bytes", 0);
        s.set_done(7);
        let p = s.snapshot().unwrap();
        assert!(
            p.to_string().starts_with("loading collections: 7 bytes ("),
            "{p}"
        );
        s.finish();
        assert!(s.snapshot().is_none());
    }
}
