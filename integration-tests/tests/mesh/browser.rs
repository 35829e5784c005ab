//! Headless Chromium for the page tests (`console.rs`, `search_page.rs`): one page load in a
//! fresh profile, bounded by a deadline, its DOM or a screenshot. Without `/usr/bin/chromium`
//! (or `$CIPD_TEST_CHROMIUM`) [`available`] says so and the tests pass.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Longest one browser run may take; it only bounds failure.
pub(crate) const BROWSER_DEADLINE: Duration = Duration::from_secs(120);

pub(crate) fn chromium_path() -> PathBuf {
    std::env::var_os("CIPD_TEST_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"))
}

/// What one page load is for.
pub(crate) enum Output<'a> {
    /// Print the DOM after the page settled.
    Dom,
    /// Save a screenshot there, 1280 pixels wide and this high.
    Screenshot(&'a Path, u32),
}

/// Loads `url` in a fresh headless Chromium profile under `work`; returns its stdout (the
/// DOM, for [`Output::Dom`]).
pub(crate) fn browse(work: &Path, url: &str, output: Output<'_>) -> String {
    let run = tempfile::tempdir_in(work).unwrap();
    let mut args = vec![
        "--headless=new".to_owned(),
        "--disable-gpu".to_owned(),
        "--no-sandbox".to_owned(),
        "--no-first-run".to_owned(),
        "--no-default-browser-check".to_owned(),
        "--disable-extensions".to_owned(),
        "--disable-dev-shm-usage".to_owned(),
        "--hide-scrollbars".to_owned(),
        format!("--user-data-dir={}", run.path().join("profile").display()),
        "--virtual-time-budget=5000".to_owned(),
    ];
    match output {
        Output::Dom => args.push("--dump-dom".to_owned()),
        Output::Screenshot(path, height) => {
            args.push(format!("--screenshot={}", path.display()));
            args.push(format!("--window-size=1280,{height}"));
        }
    }
    args.push(url.to_owned());
    // Files, not pipes: a big DOM must not fill a pipe nobody reads while we wait.
    let (out_path, err_path) = (run.path().join("stdout"), run.path().join("stderr"));
    let mut child = Command::new(chromium_path())
        .args(&args)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .expect("chromium starts");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > BROWSER_DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "chromium took longer than {BROWSER_DEADLINE:?} on {url}; stderr:\n{}",
                std::fs::read_to_string(&err_path).unwrap_or_default()
            );
        }
        // Re-check for the exit; the deadline above bounds the wait.
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut out = String::new();
    std::fs::File::open(&out_path)
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    assert!(
        status.success(),
        "chromium failed ({status}) on {url}; stderr:\n{}",
        std::fs::read_to_string(&err_path).unwrap_or_default()
    );
    out
}

/// A screenshot of `url` at `path`, `height` pixels high, taken on the blocking pool (the
/// nodes answering the browser run on the caller's runtime).
pub(crate) async fn screenshot(work: &Path, url: &str, path: PathBuf, height: u32) {
    let (work, url, shown) = (work.to_owned(), url.to_owned(), path.clone());
    tokio::task::spawn_blocking(move || browse(&work, &url, Output::Screenshot(&path, height)))
        .await
        .unwrap();
    let size = std::fs::metadata(&shown).map(|m| m.len()).unwrap_or(0);
    assert!(size > 0, "no screenshot at {}", shown.display());
    println!("screenshot: {}", shown.display());
}
