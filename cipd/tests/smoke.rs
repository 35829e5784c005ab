//! The `cipd` binary: the no-config sample node answers its own sample query, and
//! `check-config` explains bad files and exits 64. Also parses every config in `deploy/`.

#![allow(missing_docs)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Kills the daemon when the test ends, however it ends.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn sample_node_answers_its_sample_query() {
    let state = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_cipd"))
        .env("XDG_STATE_HOME", state.path())
        .env("XDG_RUNTIME_DIR", state.path())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let _guard = Running(child);
    let mut lines = BufReader::new(stdout).lines();
    let mut url = None;
    let mut try_line = None;
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let Some(u) = line.strip_prefix("listening for queries on ") {
            url = Some(u.to_owned());
        }
        if line.starts_with("try: ") {
            try_line = Some(line);
            break;
        }
    }
    let url = url.expect("a 'listening for queries on' line");
    let try_line = try_line.expect("a 'try:' line");
    assert!(
        try_line.contains(&url) && try_line.contains(cipd::store::sample::SAMPLE_QUERY),
        "{try_line}"
    );

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let q = cipd::ctl::query::percent_encode(cipd::store::sample::SAMPLE_QUERY);
    let answer: cipd::model::answer::QueryAnswer = rt
        .block_on(cipd::ctl::query::get_json(
            &url,
            &format!("/v1/referrals?q={q}"),
            Duration::from_secs(10),
        ))
        .unwrap();
    assert!(answer.local >= 1, "{answer:?}");
    let objects: cipd::model::answer::ObjectsAnswer = rt
        .block_on(cipd::ctl::query::get_json(
            &url,
            &format!("/v1/objects?q={q}"),
            Duration::from_secs(10),
        ))
        .unwrap();
    assert_eq!(objects.total, answer.local);
    assert!(objects.objects.iter().all(|o| {
        o.attributes
            .iter()
            .any(|(n, v)| n == "Author" && v == "Garcia")
    }));
    let err = rt
        .block_on(cipd::ctl::query::get_json::<serde_json::Value>(
            &url,
            "/v1/referrals?q=%3D",
            Duration::from_secs(10),
        ))
        .unwrap_err();
    assert!(err.to_string().contains("HTTP 400"), "{err}");

    // The same node over RDM, through cipctl.
    let cipctl = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_cipctl"))
            .args(args)
            .output()
            .unwrap()
    };
    let status = cipctl(&["rdm", "status", &url]);
    assert!(status.status.success(), "{status:?}");
    assert!(String::from_utf8_lossy(&status.stdout).contains("catalog"));
    let rds = cipctl(&["rdm", "get", &url, "--hits", "2", "--attributes", "Title"]);
    assert!(rds.status.success(), "{rds:?}");
    let objs = cip_proto::soif::parse_all(rds.stdout, cip_proto::soif::Limits::default()).unwrap();
    assert_eq!(objs.len(), 2);
    assert!(
        objs.iter()
            .all(|o| o.attributes.len() == 1 && o.first("Title").is_some())
    );
    let schema = cipctl(&["rdm", "schema", &url]);
    assert!(
        String::from_utf8_lossy(&schema.stdout).contains("@SCHEMA"),
        "{schema:?}"
    );
    let missing = cipctl(&["rdm", "get", &url, "--catalog", "x-catalog://h/none"]);
    assert_eq!(missing.status.code(), Some(1), "{missing:?}");
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no catalog"));
    // And its Hina-Di file: the sample's documents have URLs and dates.
    let hina = rt
        .block_on(web().get(
            &format!("{url}/hina.di"),
            None,
            cipd::sys::http::FetchLimits {
                timeout: Duration::from_secs(10),
                max_bytes: 1 << 20,
            },
        ))
        .unwrap();
    let cipd::sys::http::Fetched::Body { bytes, .. } = hina else {
        panic!("a body")
    };
    let parsed = cip_proto::hinadi::parse_bytes(&bytes, Default::default()).unwrap();
    assert!(parsed.blocks.len() >= 24, "{}", parsed.blocks.len());
}

#[test]
fn check_config_explains_problems_and_exits_64() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "data_dir = \"x\"\n[node]\ndsi = \"1.02\"\n[[peer]]\nname = \"p\"\nhost = \"h\"\nrole = \"poll\"\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_cipd"))
        .arg("check-config")
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("node.dsi") && err.contains("peer[0].port"),
        "{err}"
    );

    let typo = dir.path().join("typo.toml");
    std::fs::write(
        &typo,
        "data_dir = \"x\"\n[node]\ndsi = \"1.2\"\nbase_url = \"http://x/\"\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_cipd"))
        .arg("check-config")
        .arg(&typo)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("base_url") && err.contains("line 4"), "{err}");

    let good = dir.path().join("good.toml");
    std::fs::write(
        &good,
        format!(
            "data_dir = {:?}\n[node]\ndsi = \"1.2\"\n",
            dir.path().join("spool")
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_cipd"))
        .arg("check-config")
        .arg(&good)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let out = Command::new(env!("CARGO_BIN_EXE_cipd"))
        .arg("--config")
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
}

#[test]
fn every_deploy_config_parses() {
    let deploy = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy");
    let mut n = 0;
    let mut dirs = vec![deploy.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "toml") {
                cipd::model::config::read_config(&path)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                n += 1;
            }
        }
    }
    assert!(n >= 4, "configs in {}: {n}", deploy.display());
}

/// Under systemd (`Type=notify`), the daemon says READY=1 once it serves, and STOPPING=1 on
/// SIGTERM; `/healthz` and `/readyz` answer in between.
#[test]
fn systemd_hears_ready_and_stopping() {
    use std::os::unix::net::UnixDatagram;
    let state = tempfile::tempdir().unwrap();
    let path = state.path().join("notify");
    let sock = UnixDatagram::bind(&path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_cipd"))
        .env("XDG_STATE_HOME", state.path())
        .env("XDG_RUNTIME_DIR", state.path())
        .env("NOTIFY_SOCKET", &path)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let pid = child.id();
    let _guard = Running(child);
    let mut lines = BufReader::new(stdout).lines();
    let mut url = None;
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let Some(u) = line.strip_prefix("listening for queries on ") {
            url = Some(u.to_owned());
            break;
        }
    }
    let url = url.expect("an HTTP listener");
    // Keep reading what the daemon still prints, to its end.
    std::thread::spawn(move || lines.for_each(drop));
    let mut buf = [0u8; 512];
    let n = sock.recv(&mut buf).expect("a notification");
    let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(msg.contains("READY=1"), "{msg}");
    assert!(msg.contains("STATUS=serving"), "{msg}");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let limits = cipd::sys::http::FetchLimits {
        timeout: Duration::from_secs(10),
        max_bytes: 1 << 10,
    };
    for path in ["/healthz", "/readyz"] {
        let got = rt
            .block_on(web().get(&format!("{url}{path}"), None, limits))
            .unwrap();
        assert!(
            matches!(got, cipd::sys::http::Fetched::Body { .. }),
            "{path}: {got:?}"
        );
    }
    let killed = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let n = sock.recv(&mut buf).expect("a stopping notification");
    assert!(
        String::from_utf8_lossy(&buf[..n]).contains("STOPPING=1"),
        "{}",
        String::from_utf8_lossy(&buf[..n])
    );
}

fn web() -> cipd::sys::http::HttpClient {
    cipd::model::config::HttpClientConfig::default()
        .client(None, None)
        .unwrap()
}
