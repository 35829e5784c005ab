//! Work applied together: callers hand items over and wait, and one application on the
//! blocking pool takes every item handed over while the one before it ran (or waited for a
//! lock). The node's refreshes of peers that answered `unchanged` go through one: a hub
//! polling 1,000 peers every 5 s gets up to 200 a second, and each applied alone was a write
//! to the table that waited for its lock on a thread of its own while a big merge held it.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::oneshot;

/// Applies handed-over items in batches, one batch at a time (see the module doc).
pub struct Coalescer<T> {
    apply: Box<dyn Fn(Vec<T>) + Send + Sync>,
    queued: Mutex<Queued<T>>,
}

struct Queued<T> {
    items: Vec<T>,
    waiters: Vec<oneshot::Sender<()>>,
    /// An application is under way or started: it takes what is queued before it ends.
    running: bool,
}

impl<T> std::fmt::Debug for Coalescer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let q = self.lock();
        f.debug_struct("Coalescer")
            .field("queued", &q.items.len())
            .field("running", &q.running)
            .finish_non_exhaustive()
    }
}

impl<T: Send + 'static> Coalescer<T> {
    /// A coalescer that applies each batch with `apply`.
    pub fn new(apply: impl Fn(Vec<T>) + Send + Sync + 'static) -> Self {
        Self {
            apply: Box::new(apply),
            queued: Mutex::new(Queued {
                items: Vec::new(),
                waiters: Vec::new(),
                running: false,
            }),
        }
    }

    /// Hands `items` over and waits until a batch holding them was applied (or its
    /// application panicked: the panic is logged, and the caller is not left waiting).
    pub async fn submit(self: &Arc<Self>, items: impl IntoIterator<Item = T>) {
        let (tx, rx) = oneshot::channel();
        let start = {
            let mut q = self.lock();
            q.items.extend(items);
            q.waiters.push(tx);
            !std::mem::replace(&mut q.running, true)
        };
        if start {
            let this = Arc::clone(self);
            // Not awaited: the application's end is told through `rx`.
            drop(crate::sys::net::spawn_blocking(move || this.drain()));
        }
        // An error is a dropped sender: the batch's application panicked.
        let _ = rx.await;
    }

    /// Applies batches until none is queued.
    fn drain(&self) {
        loop {
            let (items, waiters) = {
                let mut q = self.lock();
                if q.waiters.is_empty() {
                    // Under the same lock as the check: a submission after it starts an
                    // application of its own.
                    q.running = false;
                    return;
                }
                (std::mem::take(&mut q.items), std::mem::take(&mut q.waiters))
            };
            let applied =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (self.apply)(items)));
            if let Err(panic) = applied {
                // A bug in `apply`: reported, its batch's waiters let go (their senders
                // dropped), and the batches queued meanwhile still applied.
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                tracing::error!(panic = %what, "a batched table write panicked; its batch is lost");
                continue;
            }
            for w in waiters {
                let _ = w.send(());
            }
        }
    }
}

impl<T> Coalescer<T> {
    fn lock(&self) -> MutexGuard<'_, Queued<T>> {
        // Plain lists: a panic elsewhere leaves them consistent.
        self.queued.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// Waits until the last application has ended (it clears `running` just after letting
    /// its waiters go).
    async fn idle<T: Send + 'static>(c: &Coalescer<T>) {
        tokio::time::timeout(std::time::Duration::from_secs(10), async {
            while c.lock().running {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("the application ends");
    }

    /// While one application is held, every submission made meanwhile waits, and they are
    /// then applied together in one batch; nothing is lost.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn submissions_made_during_an_application_are_applied_together() {
        let (entered_tx, entered_rx) = mpsc::channel::<()>();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let release_rx = Mutex::new(release_rx);
        let batches = Arc::new(Mutex::new(Vec::<Vec<u32>>::new()));
        let seen = batches.clone();
        let c = Arc::new(Coalescer::new(move |items: Vec<u32>| {
            let first = seen.lock().unwrap().is_empty();
            seen.lock().unwrap().push(items);
            if first {
                entered_tx.send(()).unwrap();
                release_rx.lock().unwrap().recv().unwrap();
            }
        }));
        let first = tokio::spawn({
            let c = c.clone();
            async move { c.submit([0]).await }
        });
        tokio::task::spawn_blocking(move || entered_rx.recv().unwrap())
            .await
            .unwrap();
        let mut rest = Vec::new();
        for i in 1..=50u32 {
            let c = c.clone();
            rest.push(tokio::spawn(async move { c.submit([i]).await }));
        }
        // Every submission is queued (none can have been applied: the first holds).
        while c.lock().waiters.len() < 50 {
            tokio::task::yield_now().await;
        }
        assert!(!first.is_finished());
        release_tx.send(()).unwrap();
        first.await.unwrap();
        for r in rest {
            r.await.unwrap();
        }
        let batches = batches.lock().unwrap().clone();
        assert_eq!(batches.len(), 2, "{batches:?}");
        assert_eq!(batches[0], [0]);
        let mut second = batches[1].clone();
        second.sort_unstable();
        assert_eq!(second, (1..=50).collect::<Vec<_>>());
        idle(&c).await;
    }

    /// A panicking application lets its waiters go, and what was queued meanwhile or comes
    /// after is still applied.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_panicking_application_leaves_no_one_waiting() {
        let applied = Arc::new(Mutex::new(Vec::<u32>::new()));
        let seen = applied.clone();
        let c = Arc::new(Coalescer::new(move |items: Vec<u32>| {
            if items.contains(&13) {
                std::thread::sleep(std::time::Duration::from_millis(20));
                panic!("bad batch");
            }
            seen.lock().unwrap().extend(items);
        }));
        let bad = tokio::spawn({
            let c = c.clone();
            async move { c.submit([13]).await }
        });
        // Until the bad batch is taken (a submission before that would join it).
        while !(c.lock().running && c.lock().waiters.is_empty()) {
            tokio::task::yield_now().await;
        }
        c.submit([7]).await;
        bad.await.unwrap();
        c.submit([8]).await;
        assert_eq!(*applied.lock().unwrap(), [7, 8]);
        idle(&c).await;
    }
}
