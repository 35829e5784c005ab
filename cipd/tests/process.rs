//! The `cipd` binary under process signals: `kill -9` at arbitrary moments while it polls a
//! peer and writes its spool never leaves a state it cannot start from (the table comes back
//! from the spool with the peer down); SIGHUP reloads; SIGTERM drains and exits 0.

#![allow(missing_docs)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const LEAF: &str = "1.3.6.1.4.1.99999.81";
const HUB: &str = "1.3.6.1.4.1.99999.80";
const WAIT: Duration = Duration::from_secs(30);

/// A running daemon; killed when dropped.
struct Daemon {
    child: Child,
    cip: String,
    http: Option<String>,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `cipd --config path` and reads its log until every listener is bound.
fn start(config: &Path, http: bool) -> Daemon {
    let mut child = Command::new(env!("CARGO_BIN_EXE_cipd"))
        .arg("--config")
        .arg(config)
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let (mut cip, mut http_url) = (None, None);
    let deadline = Instant::now() + WAIT;
    while cip.is_none() || (http && http_url.is_none()) {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = rx.recv_timeout(left).expect("cipd logs its listeners");
        if let Some(a) = after(&line, "listening for CIP on ") {
            cip = Some(a);
        }
        if let Some(u) = after(&line, "listening for queries on ") {
            http_url = Some(u);
        }
    }
    // Keep draining the log so the daemon never blocks on a full pipe.
    std::thread::spawn(move || while rx.recv().is_ok() {});
    Daemon {
        child,
        cip: cip.unwrap(),
        http: http_url,
    }
}

fn after(line: &str, marker: &str) -> Option<String> {
    let at = line.find(marker)? + marker.len();
    Some(line[at..].split_whitespace().next()?.to_owned())
}

fn leaf_config(dir: &Path) -> std::path::PathBuf {
    std::fs::write(
        dir.join("leaf.soif"),
        "@DOCUMENT { http://leaf/1\nAuthor{6}:\tGarcia\n}\n@DOCUMENT { http://leaf/2\nAuthor{5}:\tOkafo\n}\n",
    )
    .unwrap();
    let path = dir.join("leaf.toml");
    std::fs::write(
        &path,
        format!(
            "data_dir = {:?}\n[node]\ndsi = \"{LEAF}\"\nbase_uri = \"http://leaf.example/\"\n\
             [listen]\ncip = [\"127.0.0.1:0\"]\n[[collection]]\nname = \"docs\"\ntype = \"soif\"\n\
             path = {:?}\n[export]\nattributes = [\"DOCUMENT:Author\"]\n",
            dir.join("leaf-spool").display().to_string(),
            dir.join("leaf.soif").display().to_string(),
        ),
    )
    .unwrap();
    path
}

fn hub_config(dir: &Path, leaf_cip: &str, authors: &[&str]) -> std::path::PathBuf {
    let soif: String = authors
        .iter()
        .enumerate()
        .map(|(i, a)| {
            format!(
                "@DOCUMENT {{ http://hub/{i}\nAuthor{{{}}}:\t{a}\n}}\n",
                a.len()
            )
        })
        .collect();
    std::fs::write(dir.join("hub.soif"), soif).unwrap();
    let (host, port) = leaf_cip.rsplit_once(':').unwrap();
    let path = dir.join("hub.toml");
    std::fs::write(
        &path,
        format!(
            "data_dir = {:?}\n[node]\ndsi = \"{HUB}\"\n[listen]\ncip = [\"127.0.0.1:0\"]\n\
             http = [\"127.0.0.1:0\"]\n[[collection]]\nname = \"docs\"\ntype = \"soif\"\n\
             path = {:?}\n[export]\nattributes = [\"DOCUMENT:Author\"]\n[limits]\n\
             watch_interval = \"0s\"\nconnect_timeout = \"1s\"\n\
             [[peer]]\nname = \"leaf\"\nhost = \"{host}\"\nport = {port}\nrole = \"poll\"\n\
             dsi = \"{LEAF}\"\npoll_interval = \"20ms\"\n",
            dir.join("hub-spool").display().to_string(),
            dir.join("hub.soif").display().to_string(),
        ),
    )
    .unwrap();
    path
}

fn get(rt: &tokio::runtime::Runtime, url: &str, q: &str) -> cipd::model::answer::QueryAnswer {
    let path = format!("/v1/referrals?q={}", cipd::ctl::query::percent_encode(q));
    rt.block_on(cipd::ctl::query::get_json(
        url,
        &path,
        Duration::from_secs(5),
    ))
    .unwrap()
}

/// Polls `f` until it holds (the deadline only bounds failure).
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(child.id().to_string())
        .status();
    assert!(ok.unwrap().success());
}

/// A running leaf with two objects, and a hub configuration polling it every 20 ms.
fn leaf_and_hub_config() -> (tempfile::TempDir, tokio::runtime::Runtime, Daemon, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let leaf = start(&leaf_config(dir.path()), false);
    let hub_toml = hub_config(dir.path(), &leaf.cip, &["Hal"]);
    (dir, rt, leaf, hub_toml)
}

#[test]
fn kill_9_at_any_moment_then_restart_from_the_spool_with_the_peer_down() {
    let (dir, rt, leaf, hub_toml) = leaf_and_hub_config();
    // The hub polls every 20 ms and rewrites its spool on each poll: kill it at several
    // moments in that cycle.
    for round in 0..4u64 {
        let hub = start(&hub_toml, true);
        let url = hub.http.clone().unwrap();
        eventually("the hub refers to the leaf", || {
            get(&rt, &url, "DOCUMENT:Author=Garcia")
                .referrals
                .iter()
                .any(|r| r.dsi == LEAF)
        });
        std::thread::sleep(Duration::from_millis(7 * round + 3));
        drop(hub); // SIGKILL
    }
    drop(leaf);

    // Peer down: the restarted hub answers from its spool alone.
    let hub = start(&hub_toml, true);
    let url = hub.http.clone().unwrap();
    let answer = get(&rt, &url, "DOCUMENT:Author=Garcia");
    let r = answer
        .referrals
        .iter()
        .find(|r| r.dsi == LEAF)
        .expect("restored from the spool");
    assert_eq!((r.count, r.total), (1, 2));
    let leftovers: Vec<_> = std::fs::read_dir(dir.path().join("hub-spool"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp"))
        .collect();
    assert!(
        leftovers.is_empty(),
        "temporary files cleaned at start: {leftovers:?}"
    );
}

#[test]
fn sighup_reloads_and_sigterm_drains_and_exits_0() {
    let (dir, rt, leaf, hub_toml) = leaf_and_hub_config();
    let mut hub = start(&hub_toml, true);
    let url = hub.http.clone().unwrap();
    assert_eq!(get(&rt, &url, "DOCUMENT:Author=Hal").local, 1);

    // A changed collection (the watcher is off): SIGHUP re-reads it.
    hub_config(dir.path(), &leaf.cip, &["Hal", "Hal", "Ida"]);
    signal(&hub.child, "HUP");
    eventually("the reload", || {
        get(&rt, &url, "DOCUMENT:Author=Hal").local == 2
    });

    // A broken config on SIGHUP is refused; the node keeps serving.
    std::fs::write(&hub_toml, "this is not toml").unwrap();
    signal(&hub.child, "HUP");
    assert_eq!(get(&rt, &url, "DOCUMENT:Author=Ida").local, 1);

    signal(&hub.child, "TERM");
    let deadline = Instant::now() + WAIT;
    let status = loop {
        if let Some(s) = hub.child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "cipd did not stop after SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0), "SIGTERM drains and exits 0");
}

/// `cipctl` reads its proxy from the environment, as curl does: with `HTTP_PROXY` set, a
/// query for a server the machine cannot resolve goes to the proxy as an absolute-form
/// request, and the proxy's answer is what `cipctl` reports. `NO_PROXY` sends it direct.
#[test]
fn cipctl_goes_through_the_proxy_the_environment_names() {
    use std::io::{Read as _, Write as _};
    let proxy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = proxy.local_addr().unwrap();
    let seen = std::thread::spawn(move || {
        let (mut s, _) = proxy.accept().unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") && s.read(&mut byte).unwrap() == 1 {
            head.push(byte[0]);
        }
        let body = r#"{"status":404,"error":"not-found","message":"answered by the proxy"}"#;
        write!(
            s,
            "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        String::from_utf8_lossy(&head).into_owned()
    });
    let run = |no_proxy: &str| {
        Command::new(env!("CARGO_BIN_EXE_cipctl"))
            .args([
                "query",
                "--server",
                "http://cipd.invalid:7080",
                "--timeout",
                "5s",
                "Author=Garcia",
            ])
            .env("HTTP_PROXY", format!("http://{addr}"))
            .env("NO_PROXY", no_proxy)
            .env_remove("http_proxy")
            .env_remove("no_proxy")
            .output()
            .unwrap()
    };
    let out = run("");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("answered by the proxy"), "{stderr}");
    let head = seen.join().unwrap();
    assert!(
        head.starts_with("GET http://cipd.invalid:7080/v1/referrals?q=Author%3DGarcia "),
        "{head}"
    );
    // Excluded by NO_PROXY, the name is looked up directly, and fails.
    let direct = run("cipd.invalid");
    let stderr = String::from_utf8_lossy(&direct.stderr);
    assert!(!stderr.contains("answered by the proxy"), "{stderr}");
    assert!(stderr.contains("cannot connect"), "{stderr}");
}

/// With no CA certificates on the system (a minimal container) the HTTP client still
/// builds, plain http works, and an https request fails saying why.
#[test]
fn without_system_roots_https_fails_saying_why() {
    let dir = tempfile::tempdir().unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".into()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let (cert_path, key_path) = (dir.path().join("c.pem"), dir.path().join("k.pem"));
    std::fs::write(&cert_path, cert.pem()).unwrap();
    std::fs::write(&key_path, key.serialize_pem()).unwrap();
    let config = cipd::sys::tls::server_config(&cert_path, &key_path, None).unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        // One TLS handshake attempt; the client refuses the certificate.
        if let Ok((mut tcp, _)) = listener.accept() {
            let mut conn = rustls::ServerConnection::new(config).unwrap();
            let _ = conn.complete_io(&mut tcp);
        }
    });
    let out = Command::new(env!("CARGO_BIN_EXE_cipctl"))
        .args([
            "query",
            "--server",
            &format!("https://{addr}"),
            "--timeout",
            "10s",
            "Author=Garcia",
        ])
        .env("SSL_CERT_FILE", dir.path().join("none.pem"))
        .env("SSL_CERT_DIR", dir.path().join("none"))
        .env("NO_PROXY", "*")
        .output()
        .unwrap();
    let _ = server.join();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("no trusted CA certificates"), "{stderr}");
}
