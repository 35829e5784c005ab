//! Peers that come and go: which polled peers do not answer now (their referrals say so),
//! and taking the hint of one unreachable past `limits.peer_gone_after` out of the table
//! until it answers again (PROTOCOL.md, "Peers that come and go").

use super::*;

impl Node {
    /// Notes the outcome of a poll of `name`: on the first failure after answers it becomes
    /// unreachable (its referrals say so), on an answer reachable again (and no longer gone).
    /// Returns how long it has been unreachable (zero when it answered) and whether its
    /// hint has left the table already.
    pub fn note_reachable(&self, name: &str, answered: bool) -> (Duration, bool) {
        let now = SystemTime::now();
        // How long is measured on the runtime's clock, not the wall clock: they agree in
        // production, and where they do not (a simulation, a paused test runtime) the
        // runtime's is the one the timers and polls run on.
        let clock = self.uptime();
        let mut changed = false;
        let mut back = false;
        let (mut since, mut gone) = (None, false);
        self.update_peer(name, |s| {
            if answered {
                changed = s.unreachable_since.take().is_some() || s.gone;
                s.unreachable_at = None;
                back = s.gone;
                s.gone = false;
            } else {
                changed = s.unreachable_since.is_none();
                s.unreachable_since.get_or_insert(now);
                since = Some(*s.unreachable_at.get_or_insert(clock));
                gone = s.gone;
            }
        });
        if changed {
            self.refresh_unreachable();
        }
        if back {
            // We reach it directly again: our peers may leave it out of their answers.
            self.wake_polls();
        }
        let down_for = since.map_or(Duration::ZERO, |t| clock.saturating_sub(t));
        (down_for, gone)
    }

    /// Takes `name`'s hint out of the table (so out of referrals and of the out-bound hint)
    /// while it is unreachable: the spooled copy stays, and its next answer brings it back
    /// (the payload's digest is forgotten, so the same hint is imported again). Writes the
    /// table: call it off the async workers. True when a hint was taken out.
    pub fn suspend_peer(&self, name: &str) -> bool {
        let Some(dsi) = self.peer_dsi(name) else {
            return false;
        };
        let removed = {
            let mut imported = self.imported.lock();
            imported.remove(&dsi);
            self.table.remove(&dsi)
        };
        self.update_peer(name, |s| s.gone = true);
        // Gone, it is no longer asked apart for our own sake: our other peers may bring
        // its data (a route round the gap).
        self.wake_polls();
        if removed {
            tracing::warn!(peer = %name, %dsi, "peer unreachable for limits.peer_gone_after: its hint leaves the table until it answers");
            self.forget_hints(std::slice::from_ref(&dsi));
            self.note_table_change();
            self.outbound.request_for([&dsi]);
        }
        removed
    }

    /// Rebuilds the set of unreachable datasets the referral answers mark, and drops the
    /// answers computed without it.
    fn refresh_unreachable(&self) {
        let set: std::collections::HashSet<Dsi> = lock(&self.peers)
            .values()
            .filter(|s| s.unreachable_since.is_some())
            .filter_map(|s| s.dsi.as_deref())
            .filter_map(|d| Dsi::new(d).ok())
            .collect();
        self.unreachable.store(Arc::new(set));
        self.invalidate_answers();
    }
}
