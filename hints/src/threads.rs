//! Work handed to scoped threads that falls back to the calling thread: a table write must
//! not fail, nor panic, because the system would not start one more thread.

use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{Builder, Scope, ScopedJoinHandle};

/// Work started by [`spawn_or_run`]: on a thread of its own, or already done.
pub(crate) enum Job<'scope, R> {
    Thread(ScopedJoinHandle<'scope, Option<R>>),
    Done(Option<R>),
}

impl<R> Job<'_, R> {
    /// The work's result; `None` when it panicked on its thread (the caller decides whether
    /// to do it again or to resume the panic).
    pub(crate) fn join(self) -> Option<std::thread::Result<R>> {
        match self {
            Job::Thread(h) => match h.join() {
                Ok(r) => r.map(Ok),
                Err(panic) => Some(Err(panic)),
            },
            Job::Done(r) => r.map(Ok),
        }
    }
}

/// Runs `work` on a new thread of `scope` (made by `builder`), or right here when no
/// thread can be started.
pub(crate) fn spawn_or_run<'scope, R, F>(
    scope: &'scope Scope<'scope, '_>,
    builder: Builder,
    work: F,
) -> Job<'scope, R>
where
    R: Send + 'scope,
    F: FnOnce() -> R + Send + 'scope,
{
    // Whoever takes the work out runs it: the thread if it starts, else this one.
    let slot = Arc::new(Mutex::new(Some(work)));
    let theirs = Arc::clone(&slot);
    let take = |s: &Mutex<Option<F>>| s.lock().unwrap_or_else(PoisonError::into_inner).take();
    match builder.spawn_scoped(scope, move || take(&theirs).map(|work| work())) {
        Ok(handle) => Job::Thread(handle),
        Err(_) => Job::Done(take(&slot).map(|work| work())),
    }
}

/// Runs `work` on each of `items`, on a thread each when there are several (the first on
/// the calling thread, which then waits for the others), in order; a panic on one of them
/// is resumed here.
pub(crate) fn on_threads<T: Send, R: Send>(items: Vec<T>, work: impl Fn(T) -> R + Sync) -> Vec<R> {
    on_threads_with(items, work, Builder::new)
}

/// Runs `work` on `threads` threads at once (the first the calling thread; a thread that
/// cannot start runs its share here first) for workers that share their items through
/// atomics; returns what each returned, leaving out any that panicked: their items are
/// lost, which callers accept where only speed depends on them.
pub(crate) fn workers<R: Send>(threads: usize, work: impl Fn() -> R + Sync) -> Vec<R> {
    if threads <= 1 {
        return vec![work()];
    }
    std::thread::scope(|s| {
        let work = &work;
        let jobs: Vec<_> = (1..threads)
            .map(|_| spawn_or_run(s, Builder::new(), work))
            .collect();
        // A panic here is left out as the others' are.
        let mine = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
        let mut out: Vec<R> = mine.into_iter().collect();
        out.extend(
            jobs.into_iter()
                .filter_map(|j| j.join().and_then(Result::ok)),
        );
        out
    })
}

/// [`on_threads`], with the threads made by `builder` (tests make ones that cannot start).
fn on_threads_with<T: Send, R: Send>(
    items: Vec<T>,
    work: impl Fn(T) -> R + Sync,
    builder: impl Fn() -> Builder,
) -> Vec<R> {
    let mut items = items.into_iter();
    let Some(first) = items.next() else {
        return Vec::new();
    };
    std::thread::scope(|s| {
        let work = &work;
        let jobs: Vec<_> = items
            .map(|item| spawn_or_run(s, builder(), move || work(item)))
            .collect();
        let mut out = Vec::with_capacity(jobs.len() + 1);
        out.push(work(first));
        for job in jobs {
            match job.join() {
                Some(Ok(r)) => out.push(r),
                Some(Err(panic)) => std::panic::resume_unwind(panic),
                // The work is taken exactly once, by whoever runs it.
                None => unreachable!("a job that did not panic has a result"),
            }
        }
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A thread builder whose threads cannot start (no stack that big can be mapped).
    fn unstartable() -> Builder {
        Builder::new().stack_size(usize::MAX / 2)
    }

    #[test]
    fn work_runs_here_when_no_thread_starts() {
        assert!(unstartable().spawn(|| ()).is_err(), "the test's premise");
        let here = std::thread::current().id();
        std::thread::scope(|s| {
            let job = spawn_or_run(s, unstartable(), || std::thread::current().id());
            assert_eq!(job.join().unwrap().unwrap(), here);
            let job = spawn_or_run(s, Builder::new(), || std::thread::current().id());
            assert_ne!(job.join().unwrap().unwrap(), here);
        });
        let squares = on_threads_with((0..5u32).collect(), |i| i * i, unstartable);
        assert_eq!(squares, [0, 1, 4, 9, 16]);
    }

    #[test]
    fn results_come_in_order_and_panics_are_resumed() {
        assert_eq!(on_threads(Vec::<u32>::new(), |i| i), Vec::<u32>::new());
        assert_eq!(on_threads(vec![7u32], |i| i + 1), [8]);
        assert_eq!(
            on_threads((0..6u32).collect(), |i| i * 10),
            [0, 10, 20, 30, 40, 50]
        );
        let caught = std::panic::catch_unwind(|| {
            on_threads((0..3u32).collect(), |i| {
                assert_ne!(i, 2, "the third fails");
                i
            })
        });
        assert!(caught.is_err());
        std::thread::scope(|s| {
            let job = spawn_or_run(s, Builder::new(), || panic!("on its thread"));
            assert!(matches!(job.join(), Some(Err(_))));
        });
    }

    /// Workers share their items; one that panics is left out, the others' results stay.
    #[test]
    fn workers_share_items_and_a_panicked_one_is_left_out() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let next = AtomicUsize::new(0);
        let work = || {
            let mut mine = Vec::new();
            loop {
                let k = next.fetch_add(1, Ordering::Relaxed);
                if k >= 100 {
                    return mine;
                }
                mine.push(k);
            }
        };
        let mut all: Vec<usize> = workers(3, work).into_iter().flatten().collect();
        all.sort_unstable();
        assert_eq!(all, (0..100).collect::<Vec<_>>());
        assert_eq!(workers(1, || 5), [5]);
        let calls = AtomicUsize::new(0);
        let out = workers(3, || {
            // Whichever worker comes third panics, on its thread or on this one.
            assert_ne!(calls.fetch_add(1, Ordering::SeqCst), 2, "the third fails");
            1
        });
        assert_eq!(out.len(), 2);
        let here = std::thread::current().id();
        let out = workers(3, || {
            assert_ne!(
                std::thread::current().id(),
                here,
                "this thread's worker fails"
            );
            1
        });
        assert_eq!(out, [1, 1]);
    }
}
