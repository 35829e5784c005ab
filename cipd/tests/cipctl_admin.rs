//! `cipctl` admin commands as operators run them: the real binary against an in-process
//! daemon's socket, checking output and exit codes (0 done, 1 refused, 3 unreachable).

use std::path::Path;
use std::process::{Command, Output};

use cipd::daemon::Daemon;
use cipd::model::config::Config;

fn cipctl(socket: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cipctl"))
        .arg("--socket")
        .arg(socket)
        .args(args)
        .output()
        .expect("cipctl runs")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_commands_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("admin.sock");
    let config = Config::from_toml(&format!(
        r#"data_dir = {data:?}
[node]
dsi = "1.3.6.1.4.1.99999.77"
[listen]
cip = ["127.0.0.1:0"]
http = ["127.0.0.1:0"]
admin_socket = {socket:?}
[[collection]]
name = "sample"
type = "sample"
[limits]
max_query_terms = 2
local_scan_max_objects = 1
"#,
        data = dir.path().join("spool").display().to_string(),
        socket = socket.display().to_string(),
    ))
    .unwrap();
    let daemon = Daemon::start(config).await.unwrap();
    // The configured query bound applies to every front-end.
    let node = daemon.node();
    assert!(node.referrals("Author=a & Title=b", false, None).is_ok());
    let err = node
        .referrals("Author=a & Title=b & Type=c", false, None)
        .unwrap_err();
    assert!(
        err.to_string().contains("query has more than 2 terms"),
        "{err}"
    );
    // An attribute the node does not index, past the scan bound: 400 not-indexed.
    let url = format!("http://{}", daemon.http_addr().unwrap());
    let err = cipd::ctl::query::get_json::<serde_json::Value>(
        &url,
        "/v1/objects?q=DOCUMENT:Publisher=x",
        std::time::Duration::from_secs(5),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("HTTP 400") && err.contains("not indexed"),
        "{err}"
    );
    let ok = cipd::ctl::query::get_json::<serde_json::Value>(
        &url,
        "/v1/objects?q=DOCUMENT:Author=Garcia",
        std::time::Duration::from_secs(5),
    )
    .await
    .unwrap();
    assert_eq!(ok["total"], 1, "indexed attributes need no scan: {ok}");
    let s = socket.clone();
    let run = move |args: &'static [&'static str]| {
        let s = s.clone();
        tokio::task::spawn_blocking(move || cipctl(&s, args))
    };

    let o = run(&["status"]).await.unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let t = text(&o);
    assert!(
        t.contains("1.3.6.1.4.1.99999.77") && t.contains("local objects"),
        "{t}"
    );

    let o = run(&["status", "--json"]).await.unwrap();
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["dsi"], "1.3.6.1.4.1.99999.77");

    let o = run(&["export"]).await.unwrap();
    assert!(o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stdout).starts_with("@CIP-HINT"),
        "{}",
        text(&o)
    );

    let o = run(&["metrics"]).await.unwrap();
    assert!(String::from_utf8_lossy(&o.stdout).contains("# TYPE cipd_queries_total counter"));

    let o = run(&["drop-peer", "1.2.3"]).await.unwrap();
    assert_eq!(
        o.status.code(),
        Some(1),
        "refused commands exit 1: {}",
        text(&o)
    );
    assert!(text(&o).contains("unknown peer"), "{}", text(&o));

    let o = run(&["poll", "nobody", "--json"]).await.unwrap();
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["error"]["kind"], "unknown-peer");

    let o = run(&["shutdown"]).await.unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(daemon.shutdown().await);

    // The daemon is gone: the operator is told what to check, exit 3.
    let o = run(&["status"]).await.unwrap();
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(text(&o).contains("is cipd running?"), "{}", text(&o));
}
