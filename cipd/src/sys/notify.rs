//! systemd service notification (`sd_notify`, for `Type=notify` units): `READY=1` once the
//! node serves, `RELOADING=1` and `READY=1` around a reload, `STOPPING=1` at shutdown, a
//! `STATUS=` line, and the watchdog when the unit sets `WatchdogSec=`. Everything is a no-op
//! when the process was not started by systemd (no `NOTIFY_SOCKET`).

use std::time::Duration;

use sd_notify::NotifyState;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

fn send(states: &[NotifyState<'_>]) {
    if std::env::var_os("NOTIFY_SOCKET").is_none() {
        return;
    }
    if let Err(e) = sd_notify::notify(false, states) {
        tracing::warn!(error = %e, "cannot notify systemd");
    }
}

/// The node serves: `READY=1` and a status line.
pub fn ready(status: &str) {
    send(&[NotifyState::Ready, NotifyState::Status(status)]);
}

/// A status line only (start-up progress).
pub fn status(status: &str) {
    send(&[NotifyState::Status(status)]);
}

/// A reload begins (`RELOADING=1` with the monotonic time `Type=notify-reload` asks for).
pub fn reloading() {
    match NotifyState::monotonic_usec_now() {
        Ok(now) => send(&[NotifyState::Reloading, now]),
        Err(_) => send(&[NotifyState::Reloading]),
    }
}

/// Shutdown begins.
pub fn stopping() {
    send(&[NotifyState::Stopping]);
}

/// When the unit sets `WatchdogSec=`, pings systemd at half that interval for as long as the
/// node's runtime answers (a stuck runtime stops the pings, and systemd restarts the node).
/// The pinging task runs on `tracker` until `token` is cancelled.
pub fn spawn_watchdog(token: CancellationToken, tracker: &TaskTracker) {
    let mut usec = 0u64;
    if std::env::var_os("NOTIFY_SOCKET").is_none() || !sd_notify::watchdog_enabled(false, &mut usec)
    {
        return;
    }
    let every = Duration::from_micros(usec / 2).max(Duration::from_millis(100));
    tracker.spawn(async move {
        loop {
            tokio::select! {
                () = token.cancelled() => return,
                () = tokio::time::sleep(every) => send(&[NotifyState::Watchdog]),
            }
        }
    });
}
