//! Test nodes: a temp directory with a collection file and a config file, a daemon on
//! 127.0.0.1:0, and helpers to wait on its status.

use std::net::SocketAddr;
use std::time::Duration;

use cipd::daemon::{Daemon, RunningDaemon, StartOptions};
use cipd::model::answer::QueryAnswer;
use cipd::model::config::{Config, read_config};
use cipd::model::status::Status;
use tempfile::TempDir;

/// Upper bound on any wait; it only bounds failure.
pub const WAIT: Duration = Duration::from_secs(20);

/// Re-checks `f` every 20 ms until it holds; panics naming `what` after [`WAIT`]. For
/// conditions no status change announces.
pub async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !f() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The value of metric `name` (no labels) in a Prometheus text page.
pub fn metric(page: &str, name: &str) -> f64 {
    page.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no metric {name}"))
        .parse()
        .unwrap()
}

/// A peer entry for [`NodeSpec`].
#[derive(Clone)]
pub struct Peer {
    pub name: String,
    pub addr: SocketAddr,
    pub roles: Vec<&'static str>,
    /// Configured DSI (none: learned from the peer's first index object).
    pub dsi: Option<String>,
}

/// What a test node looks like.
#[derive(Clone)]
pub struct NodeSpec {
    pub dsi: String,
    pub authors: Vec<String>,
    pub peers: Vec<Peer>,
    pub poll_interval: &'static str,
    pub watch_interval: &'static str,
    /// More `[limits]` keys, one per line.
    pub extra_limits: String,
    /// More tables, appended to the file.
    pub extra: String,
    /// More `[listen]` keys, one per line.
    pub listen_extra: String,
    /// More `[export]` attributes (`"HINA:Keyword"`).
    pub export: Vec<&'static str>,
    /// More `[export]` keys, one per line (`default_threshold = 2`).
    pub export_extra: String,
    /// The collection as SOIF; when set it replaces the one [`collection`] builds from
    /// `authors` (for multi-valued objects and other attributes).
    pub soif: Option<String>,
    /// `[limits] poll_timeout`.
    pub poll_timeout: &'static str,
    /// `[limits] connect_timeout`.
    pub connect_timeout: &'static str,
}

impl NodeSpec {
    pub fn new(dsi: &str, authors: &[&str]) -> Self {
        Self {
            dsi: dsi.into(),
            authors: authors.iter().map(|s| (*s).to_owned()).collect(),
            peers: Vec::new(),
            poll_interval: "1h",
            watch_interval: "0s",
            extra_limits: String::new(),
            extra: String::new(),
            listen_extra: String::new(),
            export: Vec::new(),
            export_extra: String::new(),
            soif: None,
            poll_timeout: "5s",
            connect_timeout: "2s",
        }
    }

    /// The SOIF text of the node's collection.
    pub fn collection_text(&self) -> String {
        match &self.soif {
            Some(s) => s.clone(),
            None => collection(&self.authors),
        }
    }

    pub fn peer(self, name: &str, node: &TestNode, roles: &[&'static str]) -> Self {
        let dsi = node.spec.dsi.clone();
        self.peer_at(name, node.cip_addr(), roles, Some(&dsi))
    }

    /// A peer at `addr`, with or without a configured DSI.
    pub fn peer_at(
        mut self,
        name: &str,
        addr: SocketAddr,
        roles: &[&'static str],
        dsi: Option<&str>,
    ) -> Self {
        self.peers.push(Peer {
            name: name.into(),
            addr,
            roles: roles.to_vec(),
            dsi: dsi.map(str::to_owned),
        });
        self
    }
}

/// SOIF for a collection with one DOCUMENT per author.
pub fn collection(authors: &[String]) -> String {
    let mut out = String::new();
    for (i, a) in authors.iter().enumerate() {
        let title = format!("Report {i} by {a}");
        out.push_str(&format!(
            "@DOCUMENT {{ http://docs.example/{i}\nAuthor{{{}}}:\t{a}\nTitle{{{}}}:\t{title}\n}}\n\n",
            a.len(),
            title.len()
        ));
    }
    out
}

/// The configuration text of `spec` with its files in `dir`.
pub fn config_text(spec: &NodeSpec, dir: &std::path::Path) -> String {
    let mut t = format!(
        r#"data_dir = {data:?}
[node]
dsi = "{dsi}"
description = "test node {dsi}"
[listen]
cip = ["127.0.0.1:0"]
http = ["127.0.0.1:0"]
admin_socket = {admin:?}
{listen_extra}
[[collection]]
name = "docs"
type = "soif"
path = {coll:?}
[export]
attributes = ["DOCUMENT:Author", "DOCUMENT:Title"{export}]
{export_extra}
[limits]
watch_interval = "{watch}"
connect_timeout = "{connect_timeout}"
poll_timeout = "{poll_timeout}"
shutdown_grace = "5s"
{extra_limits}
"#,
        data = dir.join("spool").display().to_string(),
        admin = dir.join("admin.sock").display().to_string(),
        dsi = spec.dsi,
        coll = dir.join("docs.soif").display().to_string(),
        watch = spec.watch_interval,
        export_extra = spec.export_extra,
        connect_timeout = spec.connect_timeout,
        poll_timeout = spec.poll_timeout,
        extra_limits = spec.extra_limits,
        listen_extra = spec.listen_extra,
        export = spec
            .export
            .iter()
            .map(|a| format!(", {a:?}"))
            .collect::<String>(),
    );
    for p in &spec.peers {
        let roles: Vec<String> = p.roles.iter().map(|r| format!("{r:?}")).collect();
        t.push_str(&format!(
            "[[peer]]\nname = {:?}\nhost = \"{}\"\nport = {}\nrole = [{}]\npoll_interval = {:?}\n",
            p.name,
            p.addr.ip(),
            p.addr.port(),
            roles.join(", "),
            spec.poll_interval
        ));
        if let Some(d) = &p.dsi {
            t.push_str(&format!("dsi = {d:?}\n"));
        }
    }
    t.push_str(&spec.extra);
    t
}

/// A running test node.
pub struct TestNode {
    pub spec: NodeSpec,
    pub dir: TempDir,
    pub daemon: RunningDaemon,
}

impl TestNode {
    /// Writes the files of `spec` into a fresh temp dir and starts a node.
    pub async fn start(spec: NodeSpec) -> Self {
        let dir = tempfile::tempdir().unwrap();
        Self::start_in(spec, dir).await
    }

    /// Starts (or restarts) a node in an existing directory.
    pub async fn start_in(spec: NodeSpec, dir: TempDir) -> Self {
        Self::start_edited(spec, dir, |text| text).await
    }

    /// As [`TestNode::start_in`], with the configuration text passed through `edit` first
    /// (other listen addresses, keys the spec has no field for).
    pub async fn start_edited(
        spec: NodeSpec,
        dir: TempDir,
        edit: impl FnOnce(String) -> String,
    ) -> Self {
        std::fs::write(dir.path().join("docs.soif"), spec.collection_text()).unwrap();
        let path = dir.path().join("cipd.toml");
        std::fs::write(&path, edit(config_text(&spec, dir.path()))).unwrap();
        let config = read_config(&path).unwrap();
        let daemon = Daemon::start_with(
            config,
            StartOptions {
                config_path: Some(path),
                log: None,
                network: None,
            },
        )
        .await
        .unwrap();
        Self { spec, dir, daemon }
    }

    pub fn cip_addr(&self) -> SocketAddr {
        self.daemon.cip_addr().unwrap()
    }

    pub fn http_url(&self) -> String {
        format!("http://{}", self.daemon.http_addr().unwrap())
    }

    /// The node's admin socket.
    pub fn admin_socket(&self) -> std::path::PathBuf {
        self.dir.path().join("admin.sock")
    }

    pub fn config(&self) -> std::sync::Arc<Config> {
        self.daemon.node().config()
    }

    /// Rewrites the config file for `spec` (same directory) and reloads.
    pub async fn reconfigure(&mut self, spec: NodeSpec) {
        std::fs::write(
            self.dir.path().join("cipd.toml"),
            config_text(&spec, self.dir.path()),
        )
        .unwrap();
        self.spec = spec;
        self.daemon.node().reload().await.unwrap();
    }

    /// Replaces the collection with `soif` and reloads.
    pub async fn set_soif(&mut self, soif: String) {
        std::fs::write(self.dir.path().join("docs.soif"), &soif).unwrap();
        self.spec.soif = Some(soif);
        self.daemon.node().reload().await.unwrap();
    }

    /// Rewrites the collection and reloads.
    pub async fn set_authors(&mut self, authors: &[&str]) {
        self.spec.authors = authors.iter().map(|s| (*s).to_owned()).collect();
        self.spec.soif = None;
        std::fs::write(
            self.dir.path().join("docs.soif"),
            collection(&self.spec.authors),
        )
        .unwrap();
        self.daemon.node().reload().await.unwrap();
    }

    /// Waits until `f` holds for the status.
    pub async fn wait_for(&self, what: &str, f: impl FnMut(&Status) -> bool) -> Status {
        let mut rx = self.daemon.status();
        match tokio::time::timeout(WAIT, rx.wait_for(f)).await {
            Ok(Ok(s)) => s.clone(),
            _ => panic!(
                "{}: timed out waiting for {what}; status {:?}",
                self.spec.dsi,
                self.daemon.node().status_snapshot()
            ),
        }
    }

    /// Referrals for `q` over HTTP.
    pub async fn query(&self, q: &str) -> QueryAnswer {
        self.query_with(q, false).await
    }

    /// Referrals for `q` over HTTP, possible ones too when `possible`.
    pub async fn query_with(&self, q: &str, possible: bool) -> QueryAnswer {
        self.query_page(q, possible, None).await
    }

    /// Referrals for `q` over HTTP with `limit` (the node's default page when `None`).
    pub async fn query_page(&self, q: &str, possible: bool, limit: Option<usize>) -> QueryAnswer {
        let path = format!(
            "/v1/referrals?q={}{}{}",
            cipd::ctl::query::percent_encode(q),
            if possible { "&possible=true" } else { "" },
            limit.map(|n| format!("&limit={n}")).unwrap_or_default()
        );
        cipd::ctl::query::get_json(&self.http_url(), &path, Duration::from_secs(5))
            .await
            .unwrap()
    }

    /// Polls until the referrals for `q` satisfy `f`, nudging nothing: state changes arrive
    /// through the status channel, so this re-checks on every status change.
    pub async fn wait_query(
        &self,
        q: &str,
        mut f: impl FnMut(&QueryAnswer) -> bool,
    ) -> QueryAnswer {
        let mut rx = self.daemon.status();
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let a = self.query(q).await;
            if f(&a) {
                return a;
            }
            if tokio::time::timeout_at(deadline, rx.changed())
                .await
                .is_err()
            {
                panic!(
                    "{}: timed out waiting for query {q:?}; last answer {a:?}",
                    self.spec.dsi
                );
            }
        }
    }

    pub async fn stop(self) -> TempDir {
        assert!(self.daemon.shutdown().await, "shutdown within grace");
        self.dir
    }
}

/// A fake server on 127.0.0.1:0: each connection is counted and handed to `serve` on a task
/// of its own, until the returned token is cancelled. Returns the address, the connection
/// count and the token.
pub async fn fake_server<F, Fut>(
    serve: F,
) -> (
    SocketAddr,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
    tokio_util::sync::CancellationToken,
)
where
    F: Fn(tokio::net::TcpStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let token = tokio_util::sync::CancellationToken::new();
    let connections = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (t, c) = (token.clone(), connections.clone());
    tokio::spawn(async move {
        loop {
            let (stream, _) = tokio::select! {
                r = listener.accept() => match r { Ok(x) => x, Err(_) => return },
                () = t.cancelled() => return,
            };
            c.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::spawn(serve(stream));
        }
    });
    (addr, connections, token)
}

/// One CIP poll of `cip` (from 127.0.0.1) for the node's own hint: it must answer with one
/// object of DSI `dsi`. The error says what went wrong, for the attack tests' tallies.
pub async fn poll_own_hint(cip: SocketAddr, dsi: &str) -> Result<(), String> {
    use cip_proto::cip::{IndexType, Request, ResponseCode};
    let config = cipd::transport::TransportConfig {
        connect_timeout: Duration::from_secs(5),
        ..Default::default()
    };
    let mut conn = cipd::transport::CipClient::connect(cip, None, &config)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let poll = Request::Poll {
        index_type: IndexType::harvest_soif(),
        dsi: cip_proto::Dsi::new(dsi).map_err(|e| e.to_string())?,
        params: vec![],
        body: bytes::Bytes::new(),
    };
    let reply = conn
        .request(&poll)
        .await
        .map_err(|e| format!("poll: {e}"))?;
    let _ = conn.close().await;
    match reply.result {
        Some(r)
            if reply.code == ResponseCode::OkOutputFollows
                && r.objects.len() == 1
                && r.objects[0].dsi.as_str() == dsi =>
        {
            Ok(())
        }
        other => Err(format!("unexpected poll answer {} {other:?}", reply.code)),
    }
}
