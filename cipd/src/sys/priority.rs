//! Thread priorities: the threads that do background work (imports, merges, summary
//! builds) run at a lower CPU priority than the async workers that answer queries and
//! polls, so that a busy import never delays an answer while the CPUs are short.

/// Lowers the calling thread's CPU priority by `nice` steps (its nice value raised by that
/// much, at most to 19); 0 leaves it. On Linux the nice value is per thread, and threads
/// started from this one inherit it. Failures (a platform without per-thread priorities)
/// are logged at debug level and otherwise ignored: priority only changes timing.
pub fn lower_this_thread(nice: i32) {
    if nice <= 0 {
        return;
    }
    let now = rustix::process::getpriority_process(None).unwrap_or(0);
    let to = now.saturating_add(nice).min(19);
    if let Err(e) = rustix::process::setpriority_process(None, to) {
        tracing::debug!(%e, nice = to, "thread priority not lowered");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lowers_only_the_calling_thread() {
        let before = rustix::process::getpriority_process(None).unwrap_or(0);
        let inside = std::thread::spawn(|| {
            let at_start = rustix::process::getpriority_process(None).unwrap_or(0);
            lower_this_thread(3);
            let lowered = rustix::process::getpriority_process(None).unwrap_or(0);
            let child = std::thread::spawn(|| rustix::process::getpriority_process(None))
                .join()
                .expect("thread joins")
                .unwrap_or(0);
            (at_start, lowered, child)
        })
        .join()
        .expect("thread joins");
        assert_eq!(
            inside.1,
            (inside.0 + 3).min(19),
            "the thread's nice value rose by 3"
        );
        assert_eq!(inside.2, inside.1, "threads it starts inherit it");
        assert_eq!(
            rustix::process::getpriority_process(None).unwrap_or(0),
            before,
            "the calling test's thread is unchanged"
        );
    }

    #[test]
    fn zero_changes_nothing() {
        let n = std::thread::spawn(|| {
            let before = rustix::process::getpriority_process(None).unwrap_or(0);
            lower_this_thread(0);
            (
                before,
                rustix::process::getpriority_process(None).unwrap_or(0),
            )
        })
        .join()
        .expect("thread joins");
        assert_eq!(n.0, n.1);
    }
}
