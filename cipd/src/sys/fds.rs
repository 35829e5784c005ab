//! File descriptors: the connection caps need one each, and the usual soft limit (1,024
//! outside systemd) is below the default caps. At start the soft limit is raised towards
//! what the caps need, up to the hard limit (as Go's runtime and nginx's
//! `worker_rlimit_nofile` do); what cannot be had is reported.

use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

/// Descriptors kept beside the connections: listeners, peers, files, the spool.
pub const RESERVE: u64 = 256;

/// The outcome of [`ensure`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Descriptors {
    /// What the caps (and [`RESERVE`]) need.
    pub needed: u64,
    /// The soft limit now (`None`: unlimited).
    pub limit: Option<u64>,
}

impl Descriptors {
    /// Whether the limit covers what is needed.
    pub fn enough(&self) -> bool {
        self.limit.is_none_or(|l| l >= self.needed)
    }
}

/// Raises the soft `RLIMIT_NOFILE` to cover `connections` plus [`RESERVE`], up to the hard
/// limit; never lowers it.
pub fn ensure(connections: u64) -> Descriptors {
    let needed = connections.saturating_add(RESERVE);
    let current = getrlimit(Resource::Nofile);
    if current.current.is_none_or(|soft| soft >= needed) {
        return Descriptors {
            needed,
            limit: current.current,
        };
    }
    let target = match current.maximum {
        Some(hard) => needed.min(hard),
        None => needed,
    };
    let raised = Rlimit {
        current: Some(target),
        maximum: current.maximum,
    };
    let limit = match setrlimit(Resource::Nofile, raised) {
        Ok(()) => Some(target),
        Err(_) => current.current,
    };
    Descriptors { needed, limit }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_limit_covers_what_it_can() {
        let before = getrlimit(Resource::Nofile);
        // Asking for what is already there changes nothing.
        let d = ensure(0);
        assert_eq!(d.needed, RESERVE);
        assert!(d.enough() || before.current.is_some_and(|s| s < RESERVE));
        let after = getrlimit(Resource::Nofile);
        assert!(after.current >= before.current.min(Some(RESERVE)));
        // More than the hard limit cannot be had, and says so.
        if let Some(hard) = before.maximum {
            let d = ensure(hard.saturating_add(1));
            assert!(!d.enough());
            assert_eq!(d.limit, Some(hard));
        }
    }
}
