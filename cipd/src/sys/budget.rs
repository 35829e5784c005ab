//! A byte budget shared by every connection that buffers a request body (CIP frames on the
//! stream listeners, CIP-over-HTTP and RDM bodies), so the sum of what clients can make the
//! daemon hold at once is bounded, whatever the connection caps. Each buffer is free up to a
//! small allowance; past it, its growth is reserved from the budget, waiting (within the
//! request's own deadline) while other requests hold it, and refused when the deadline
//! passes first. Reservations are counted in KiB.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// Bytes of each buffer that are not counted (a connection's ordinary requests).
pub const FREE_PER_BUFFER: usize = 64 * 1024;

/// The budget.
#[derive(Debug)]
pub struct ByteBudget {
    kib: Arc<Semaphore>,
    total_kib: usize,
    /// Reservations that had to wait.
    pub waited: AtomicU64,
    /// Reservations refused (the deadline passed while waiting).
    pub refused: AtomicU64,
}

/// The budget was not available in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the in-flight memory budget ({limit} bytes) is in use by other requests")]
pub struct Exhausted {
    /// The budget, bytes.
    pub limit: u64,
}

impl ByteBudget {
    /// A budget of `bytes` (at least 1 KiB).
    pub fn new(bytes: u64) -> Arc<Self> {
        let total_kib = usize::try_from(bytes / 1024)
            .unwrap_or(usize::MAX)
            .clamp(1, Semaphore::MAX_PERMITS);
        Arc::new(Self {
            kib: Arc::new(Semaphore::new(total_kib)),
            total_kib,
            waited: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        })
    }

    /// The budget, bytes.
    pub fn limit(&self) -> u64 {
        self.total_kib as u64 * 1024
    }

    /// Bytes reserved now.
    pub fn in_use(&self) -> u64 {
        (self.total_kib - self.kib.available_permits()) as u64 * 1024
    }

    /// An empty reservation for one buffer.
    pub fn reservation(self: &Arc<Self>) -> Reservation {
        Reservation {
            budget: self.clone(),
            held: None,
        }
    }
}

/// What one buffer holds of the budget.
#[derive(Debug)]
pub struct Reservation {
    budget: Arc<ByteBudget>,
    held: Option<OwnedSemaphorePermit>,
}

impl Reservation {
    fn held_kib(&self) -> usize {
        self.held
            .as_ref()
            .map_or(0, OwnedSemaphorePermit::num_permits)
    }

    /// Makes the reservation cover a buffer of `bytes` (the first [`FREE_PER_BUFFER`] are
    /// free), waiting until `deadline` for others to give budget back.
    ///
    /// # Errors
    /// [`Exhausted`] when it is not available by then, or the buffer alone is larger than
    /// the whole budget.
    pub async fn cover(&mut self, bytes: usize, deadline: Instant) -> Result<(), Exhausted> {
        let want = bytes.saturating_sub(FREE_PER_BUFFER).div_ceil(1024);
        let more = want.saturating_sub(self.held_kib());
        if more == 0 {
            return Ok(());
        }
        let limit = self.budget.limit();
        let Ok(n) = u32::try_from(more) else {
            return Err(Exhausted { limit });
        };
        // More than the whole budget can never be had: refused at once.
        if want > self.budget.total_kib {
            self.budget.refused.fetch_add(1, Ordering::Relaxed);
            return Err(Exhausted { limit });
        }
        let sem = self.budget.kib.clone();
        let permit = match sem.clone().try_acquire_many_owned(n) {
            Ok(p) => p,
            Err(_) => {
                self.budget.waited.fetch_add(1, Ordering::Relaxed);
                match tokio::time::timeout_at(deadline, sem.acquire_many_owned(n)).await {
                    Ok(Ok(p)) => p,
                    _ => {
                        self.budget.refused.fetch_add(1, Ordering::Relaxed);
                        return Err(Exhausted { limit });
                    }
                }
            }
        };
        match &mut self.held {
            Some(h) => h.merge(permit),
            None => self.held = Some(permit),
        }
        Ok(())
    }

    /// Gives everything back (the buffer was emptied).
    pub fn release(&mut self) {
        self.held = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn buffers_share_the_budget_wait_for_it_and_are_refused_past_their_deadline() {
        let b = ByteBudget::new(1 << 20);
        let soon = || Instant::now() + Duration::from_millis(50);
        let mut a = b.reservation();
        // The free allowance costs nothing.
        a.cover(FREE_PER_BUFFER, soon()).await.unwrap();
        assert_eq!(b.in_use(), 0);
        a.cover(FREE_PER_BUFFER + 700 * 1024, soon()).await.unwrap();
        assert_eq!(b.in_use(), 700 * 1024);
        // Another buffer cannot have what is left plus more: it waits, then is refused.
        let mut c = b.reservation();
        let e = c
            .cover(FREE_PER_BUFFER + 400 * 1024, soon())
            .await
            .unwrap_err();
        assert_eq!(e.limit, 1 << 20);
        assert_eq!(b.refused.load(Ordering::Relaxed), 1);
        // Once the first gives its share back, the waiting one gets it.
        let wait = tokio::spawn(async move {
            c.cover(
                FREE_PER_BUFFER + 400 * 1024,
                Instant::now() + Duration::from_secs(10),
            )
            .await
            .map(|()| c)
        });
        tokio::task::yield_now().await;
        a.release();
        let c = wait.await.unwrap().unwrap();
        assert_eq!(b.in_use(), 400 * 1024);
        drop(c);
        assert_eq!(b.in_use(), 0);
        // More than the whole budget is refused at once.
        let mut d = b.reservation();
        assert!(d.cover(4 << 20, soon()).await.is_err());
    }
}
