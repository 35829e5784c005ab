//! The daemon's one retry schedule: a window that starts at `first` and doubles with each
//! failure in a row, up to `cap`. The peer tasks ([`crate::daemon::peer`]: polls, pushes,
//! `datachanged`) and the search's infrastructure cache ([`crate::store::health`]) both
//! take their waits from it, with their own settings; PROTOCOL.md "Retries" says which.

use std::time::Duration;

/// A doubling, capped retry window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The window after the first failure.
    pub first: Duration,
    /// The widest window.
    pub cap: Duration,
}

impl Backoff {
    /// The window after `failures` failures in a row: `first · 2^(failures-1)`, at most
    /// `cap`; zero before any failure.
    pub fn window(&self, failures: u32) -> Duration {
        if failures == 0 {
            return Duration::ZERO;
        }
        let doublings = (failures - 1).min(30);
        self.first.saturating_mul(1 << doublings).min(self.cap)
    }

    /// A uniformly random wait within [`Self::window`] ("full jitter"): nodes that failed
    /// together (one link broke under many exchanges) do not retry together, and the
    /// first retries after a short outage come within a fraction of `first`.
    pub fn full_jitter(&self, failures: u32) -> Duration {
        self.window(failures).mul_f64(fastrand::f64())
    }

    /// [`Self::window`] within ±10 %: a steady schedule that still spreads a mesh out.
    pub fn tenth_jitter(&self, failures: u32) -> Duration {
        self.window(failures).mul_f64(0.9 + 0.2 * fastrand::f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_cap() {
        let b = Backoff {
            first: Duration::from_millis(250),
            cap: Duration::from_secs(60),
        };
        let w: Vec<u128> = (0..6).map(|f| b.window(f).as_millis()).collect();
        assert_eq!(w, [0, 250, 500, 1000, 2000, 4000]);
        assert_eq!(b.window(9), Duration::from_secs(60));
        assert_eq!(b.window(u32::MAX), Duration::from_secs(60));
    }

    #[test]
    fn jitter_stays_in_the_window() {
        let b = Backoff {
            first: Duration::from_secs(1),
            cap: Duration::from_secs(3600),
        };
        for f in 1..40 {
            let w = b.window(f);
            assert!(b.full_jitter(f) <= w);
            let t = b.tenth_jitter(f);
            assert!(
                t >= w.mul_f64(0.9) && t <= w.mul_f64(1.1),
                "{f}: {t:?} of {w:?}"
            );
        }
        // Full jitter really spreads: not every draw in the upper half.
        assert!((0..64).any(|_| b.full_jitter(3) < b.window(3) / 2));
    }
}
