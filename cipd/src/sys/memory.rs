//! How much memory this process may use: the least of the machine's RAM and the limits of
//! the cgroup it runs in (v2 `memory.max`, v1 `memory.limit_in_bytes`), as a container or a
//! systemd `MemoryMax=` sets them. The routing table's default budgets are a share of it
//! (`crate::model::config::limits`), as Elasticsearch sizes its circuit breakers from the
//! heap.

use std::path::Path;

/// The memory this process may use, in bytes; none when nothing can be read (not Linux).
pub fn available() -> Option<u64> {
    available_under(Path::new("/"))
}

/// [`available`] with `/proc` and `/sys` read under `root` (tests give a fake tree).
pub fn available_under(root: &Path) -> Option<u64> {
    let ram = std::fs::read_to_string(root.join("proc/meminfo"))
        .ok()
        .and_then(|s| mem_total(&s));
    let cgroup = cgroup_limit(root);
    match (ram, cgroup) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// `MemTotal` of a `/proc/meminfo` text, in bytes.
fn mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// The memory limit of this process's cgroup (v2, else v1), when one is set.
fn cgroup_limit(root: &Path) -> Option<u64> {
    let own = std::fs::read_to_string(root.join("proc/self/cgroup")).unwrap_or_default();
    // v2: "0::/path"; v1: "N:memory:/path" (or a list naming memory).
    let v2 = own.lines().find_map(|l| l.strip_prefix("0::"));
    let v1 = own.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        controllers
            .split(',')
            .any(|c| c == "memory")
            .then_some(path)
    });
    let read = |file: &Path| -> Option<u64> {
        let s = std::fs::read_to_string(file).ok()?;
        let s = s.trim();
        // "max" (v2) or a huge number (v1's "unlimited") set no limit.
        s.parse::<u64>().ok().filter(|&n| n < (1 << 60))
    };
    if let Some(path) = v2 {
        // The tightest limit on the way from the process's cgroup up to the root.
        let mut dir = root
            .join("sys/fs/cgroup")
            .join(path.trim_start_matches('/'));
        let mut least: Option<u64> = None;
        loop {
            if let Some(n) = read(&dir.join("memory.max")) {
                least = Some(least.map_or(n, |l| l.min(n)));
            }
            if !dir.pop() || !dir.starts_with(root.join("sys/fs/cgroup")) {
                break;
            }
        }
        if least.is_some() {
            return least;
        }
    }
    if let Some(path) = v1 {
        let base = root.join("sys/fs/cgroup/memory");
        return read(
            &base
                .join(path.trim_start_matches('/'))
                .join("memory.limit_in_bytes"),
        )
        .or_else(|| read(&base.join("memory.limit_in_bytes")));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("a temp dir");
        for (path, text) in files {
            let p = dir.path().join(path);
            std::fs::create_dir_all(p.parent().expect("a parent")).expect("dirs");
            std::fs::write(p, text).expect("a file");
        }
        dir
    }

    const RAM: (&str, &str) = (
        "proc/meminfo",
        "MemTotal:       16384000 kB\nMemFree: 1 kB\n",
    );

    #[test]
    fn ram_alone() {
        let t = tree(&[RAM, ("proc/self/cgroup", "0::/user.slice\n")]);
        assert_eq!(available_under(t.path()), Some(16_384_000 * 1024));
    }

    #[test]
    fn a_cgroup_v2_limit_on_the_way_up_binds() {
        let t = tree(&[
            RAM,
            ("proc/self/cgroup", "0::/system.slice/cipd.service\n"),
            (
                "sys/fs/cgroup/system.slice/cipd.service/memory.max",
                "max\n",
            ),
            ("sys/fs/cgroup/system.slice/memory.max", "2147483648\n"),
        ]);
        assert_eq!(available_under(t.path()), Some(2 << 30));
    }

    #[test]
    fn a_cgroup_v1_limit_binds_and_unlimited_does_not() {
        let t = tree(&[
            RAM,
            (
                "proc/self/cgroup",
                "4:memory:/docker/abc\n1:cpu:/docker/abc\n",
            ),
            (
                "sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes",
                "1073741824\n",
            ),
        ]);
        assert_eq!(available_under(t.path()), Some(1 << 30));
        let t = tree(&[
            RAM,
            ("proc/self/cgroup", "4:memory:/\n"),
            (
                "sys/fs/cgroup/memory/memory.limit_in_bytes",
                "9223372036854771712\n",
            ),
        ]);
        assert_eq!(available_under(t.path()), Some(16_384_000 * 1024));
    }

    #[test]
    fn nothing_readable() {
        let t = tree(&[]);
        assert_eq!(available_under(t.path()), None);
    }
}
