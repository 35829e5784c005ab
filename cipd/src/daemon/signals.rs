//! The process signals a daemon reacts to: SIGTERM and SIGINT stop it, SIGHUP reloads it.

use std::sync::Arc;

use crate::node::Node;

/// The process signals a daemon reacts to, registered before it starts so that a signal
/// arriving during start-up (a `systemctl reload` racing the start, say) is held for the
/// daemon instead of killing the process with the default action.
#[cfg(unix)]
#[derive(Debug)]
pub struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

#[cfg(unix)]
impl Signals {
    /// Registers SIGTERM, SIGINT and SIGHUP; from now on they are delivered here.
    ///
    /// # Errors
    /// When the handlers cannot be installed.
    pub fn register() -> std::io::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Self {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    /// Acts on the signals for `node`: SIGTERM/SIGINT shut it down, SIGHUP reloads it
    /// (signals that arrived since [`Signals::register`] are handled now).
    pub fn handle(self, node: &Arc<Node>) {
        let Self {
            mut term,
            mut int,
            mut hup,
        } = self;
        let n = node.clone();
        node.tracker.spawn(async move {
            loop {
                tokio::select! {
                    _ = term.recv() => { tracing::info!("SIGTERM: shutting down"); n.shutdown(); return; }
                    _ = int.recv() => { tracing::info!("SIGINT: shutting down"); n.shutdown(); return; }
                    _ = hup.recv() => {
                        tracing::info!("SIGHUP: reloading");
                        if let Err(e) = n.reload().await {
                            tracing::error!(error = %e, "reload failed; the running configuration stays");
                        }
                    }
                    () = n.token.cancelled() => return,
                }
            }
        });
    }
}
