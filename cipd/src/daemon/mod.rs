//! Starting and stopping a node: listeners, background tasks, shutdown.
//!
//! [`Daemon::start`] binds every listener first (port 0 allowed; the bound addresses come
//! back in [`RunningDaemon`]), restores the routing table from the spool, loads the local
//! collections, and only then starts accepting connections and contacting peers. Every task
//! runs on one `TaskTracker` under one `CancellationToken` (child tokens per subsystem);
//! [`RunningDaemon::shutdown`] cancels, closes the tracker and waits up to the grace period
//! for in-flight requests. Dropping a `RunningDaemon` cancels as a fallback.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::front::conn_limit::ConnLimiter;
use crate::front::service::CipService;
use crate::front::whoispp::WhoisService;
use crate::model::config::Config;
use crate::model::status::{Listeners, Status};
use crate::node::{Node, NodeError, display_addr};
use crate::sys::net::{Bound, Network};
use crate::sys::telemetry::LogHandle;

mod accept;
pub mod peer;
#[cfg(unix)]
mod signals;
mod tasks;

use self::accept::accept_loop;
#[cfg(unix)]
pub use self::signals::Signals;
use self::tasks::{expire_loop, import_progress, watch_collections};

/// Why the daemon could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// A listener could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        source: std::io::Error,
    },
    /// A TLS listener's certificate or key could not be loaded.
    #[error("tls listener {addr}: {source}")]
    Tls {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        source: crate::sys::tls::TlsError,
    },
    /// The spool directory could not be opened.
    #[error("spool: {0}")]
    Spool(#[from] crate::store::spool::SpoolError),
    /// The admin socket could not be created.
    #[error("admin socket: {0}")]
    Admin(#[from] crate::front::admin::BindError),
    /// A worker thread (the import thread) could not be started.
    #[error("cannot start a worker thread: {0}")]
    Thread(std::io::Error),
    /// The signing key (`[signing] key`) could not be loaded.
    #[error("signing key: {0}")]
    Key(#[from] crate::model::trust::keys::KeyError),
    /// The HTTP client (`[http_client]`) could not be built.
    #[error("http_client: {0}")]
    HttpClient(String),
}

impl From<NodeError> for StartError {
    fn from(e: NodeError) -> Self {
        match e {
            NodeError::Spool(e) => Self::Spool(e),
            NodeError::Thread(e) => Self::Thread(e),
            NodeError::Key(e) => Self::Key(e),
            NodeError::HttpClient(e) => Self::HttpClient(e),
        }
    }
}

/// Options beside the configuration.
#[derive(Debug, Default, Clone)]
pub struct StartOptions {
    /// The configuration file, re-read on reload (none: reload only rescans collections).
    pub config_path: Option<PathBuf>,
    /// The log filter handle, for the admin `log-level` command.
    pub log: Option<LogHandle>,
    /// A network to bind the plain CIP and Whois++ listeners on and to open CIP
    /// connections over, instead of the host's TCP (a simulator's; see
    /// [`crate::sys::net`]). TLS and HTTP listeners stay on the host's TCP.
    pub network: Option<Arc<dyn Network>>,
}

/// Entry point.
#[derive(Debug)]
pub struct Daemon;

impl Daemon {
    /// Starts a node with `config` (see the module doc).
    ///
    /// # Errors
    /// [`StartError`] when a listener cannot be bound or the spool cannot be opened.
    pub async fn start(config: Config) -> Result<RunningDaemon, StartError> {
        Self::start_with(config, StartOptions::default()).await
    }

    /// As [`Daemon::start`], with options.
    ///
    /// # Errors
    /// As [`Daemon::start`].
    pub async fn start_with(
        config: Config,
        options: StartOptions,
    ) -> Result<RunningDaemon, StartError> {
        let token = CancellationToken::new();
        let backlog = u32::try_from(config.limits.listen_backlog).unwrap_or(u32::MAX);
        let network = options.network.clone();
        let bind_plain = |addr: SocketAddr| {
            let network = network.clone();
            async move {
                match network {
                    None => bind(addr, backlog).map(Bound::Tcp),
                    Some(net) => net
                        .bind(addr)
                        .await
                        .map(Bound::Net)
                        .map_err(|source| StartError::Bind { addr, source }),
                }
            }
        };
        let mut cip = Vec::new();
        for addr in &config.listen.cip {
            cip.push(bind_plain(*addr).await?);
        }
        let mut whoispp = Vec::new();
        for addr in &config.listen.whoispp {
            whoispp.push(bind_plain(*addr).await?);
        }
        let mut cip_tls = Vec::new();
        for l in &config.listen.cip_tls {
            cip_tls.push((Bound::Tcp(bind(l.addr, backlog)?), tls_server(l)?));
        }
        let mut http = Vec::new();
        for addr in &config.listen.http {
            http.push((bind(*addr, backlog)?, None));
        }
        for l in &config.listen.https {
            // Offer HTTP/1.1 by ALPN: clients that ask for h2 fall back to it.
            let mut server = (*tls_server(l)?).clone();
            server.alpn_protocols = vec![b"http/1.1".to_vec()];
            http.push((bind(l.addr, backlog)?, Some(Arc::new(server))));
        }
        let bound = Listeners {
            cip: cip.iter().filter_map(|l| l.local_addr().ok()).collect(),
            cip_tls: cip_tls
                .iter()
                .filter_map(|(l, _)| l.local_addr().ok())
                .collect(),
            http: http
                .iter()
                .filter(|(_, tls)| tls.is_none())
                .filter_map(|(l, _)| l.local_addr().ok())
                .collect(),
            https: http
                .iter()
                .filter(|(_, tls)| tls.is_some())
                .filter_map(|(l, _)| l.local_addr().ok())
                .collect(),
            admin: config.listen.admin_socket.clone(),
            whoispp: whoispp.iter().filter_map(|l| l.local_addr().ok()).collect(),
        };
        let admin = match &config.listen.admin_socket {
            Some(path) => Some((crate::front::admin::bind(path)?, path.clone())),
            None => None,
        };

        let grace = config.limits.shutdown_grace;
        let node = Arc::new(Node::new(
            config,
            options.config_path,
            options.log,
            token.clone(),
        )?);
        node.set_listeners(bound.clone());
        if let Some(net) = options.network {
            node.set_network(net);
        }
        // The admin socket first: `cipctl status` shows how far a long start is.
        if let Some((listener, path)) = admin {
            tracing::info!("listening for admin commands on {}", path.display());
            let backend = Arc::new(crate::front::admin::backend::NodeAdmin::new(node.clone()));
            node.tracker.spawn(crate::front::admin::serve(
                listener,
                path,
                backend,
                node.config().limits.admin,
                node.token.child_token(),
                node.tracker.clone(),
                node.metrics().listener("admin"),
            ));
        }
        {
            let n = node.clone();
            let restore = crate::sys::net::spawn_blocking(move || n.restore_spool());
            // Invariant: restore_spool does not panic; a join error would mean it did.
            if let Err(e) = crate::sys::startup::report_while(node.startup(), restore).await {
                tracing::error!(error = %e, "spool restore task failed");
            }
        }
        node.load_thesaurus();
        // The out-bound builder first: the local rebuild below requests a build.
        node.tracker.spawn(crate::pipeline::outbound::run(
            node.clone(),
            node.token.child_token(),
        ));
        node.tracker.spawn(crate::pipeline::outbound::watchdog(
            node.clone(),
            node.token.child_token(),
        ));
        crate::sys::startup::report_while(node.startup(), node.rebuild_local(true)).await;
        node.tracker
            .spawn(crate::pipeline::hinadi_feed::fetch_loop(node.clone()));
        node.tracker
            .spawn(crate::pipeline::rdm_pull::pull_loop(node.clone()));
        node.tracker
            .spawn(crate::store::journal::journal_loop(node.clone()));
        node.resolve_peers().await;
        node.begin_cold_start();

        let config = node.config();
        check_open_files(&config);
        // One limiter for the CIP listeners (plain and TLS), one for the HTTP listeners.
        let permits = ConnLimiter::new(
            "cip",
            config.limits.max_connections,
            config.limits.max_connections_per_address,
            node.metrics().listener("cip"),
        );
        let http_permits = ConnLimiter::new(
            "http",
            config.limits.max_http_connections,
            config.limits.max_http_connections_per_address,
            node.metrics().listener("http"),
        );
        spawn_cip(&node, cip, whoispp, cip_tls, &permits);
        spawn_http(&node, &config, http, &http_permits);
        let peer_changes = node.peer_changes();
        peer::restart(&node);
        node.tracker
            .spawn(peer::supervise(node.clone(), peer_changes));
        node.tracker.spawn(watch_collections(node.clone()));
        node.tracker.spawn(expire_loop(node.clone()));
        node.tracker.spawn(import_progress(node.clone()));
        node.update_status(|s| s.ready = true);
        tracing::info!(dsi = %node.identity().dsi, "cipd ready");
        crate::sys::notify::ready(&format!(
            "serving {}: {} local objects",
            node.identity().dsi,
            node.local_objects_count()
        ));
        crate::sys::notify::spawn_watchdog(node.token.child_token(), &node.tracker);
        let status = node.subscribe();
        Ok(RunningDaemon {
            node,
            listeners: bound,
            status,
            grace,
        })
    }
}

/// Warns when the open-files limit is below what the connection caps need.
fn check_open_files(config: &Config) {
    let caps = config.limits.max_connections
        + config.limits.max_http_connections
        + config.limits.admin.max_connections
        + config.limits.max_concurrent_polls;
    let fds = crate::sys::fds::ensure(caps as u64);
    if !fds.enough() {
        tracing::warn!(
            needed = fds.needed,
            limit = ?fds.limit,
            "the open-files limit is below what the connection caps need; connections \
             past it fail to be accepted (raise LimitNOFILE / ulimit -n, or lower the caps)"
        );
    }
}

/// Serves CIP on the plain, TLS and shared Whois++ listeners.
fn spawn_cip(
    node: &Arc<Node>,
    cip: Vec<Bound>,
    whoispp: Vec<Bound>,
    cip_tls: Vec<(Bound, Arc<rustls::ServerConfig>)>,
    permits: &Arc<ConnLimiter>,
) {
    let service = Arc::new(CipService::new(node.clone()));
    let whois = Arc::new(WhoisService::new(node.clone()));
    let plain = cip.into_iter().map(|l| (l, None));
    let shared = whoispp.into_iter().map(|l| (l, Some(whois.clone())));
    for (l, whois) in plain.chain(shared) {
        let addr = l.local_addr().ok().map(display_addr).unwrap_or_default();
        match whois {
            None => tracing::info!("listening for CIP on {addr}"),
            Some(_) => tracing::info!("listening for Whois++ and CIP on {addr}"),
        }
        node.tracker.spawn(accept_loop(
            node.clone(),
            l,
            None,
            service.clone(),
            whois,
            permits.clone(),
        ));
    }
    for (l, server) in cip_tls {
        let addr = l.local_addr().ok();
        tracing::info!(
            "listening for CIP over TLS on {}",
            addr.map(display_addr).unwrap_or_default()
        );
        node.tracker.spawn(accept_loop(
            node.clone(),
            l,
            Some(server),
            service.clone(),
            None,
            permits.clone(),
        ));
    }
}

/// Serves the HTTP routes on the HTTP and HTTPS listeners.
fn spawn_http(
    node: &Arc<Node>,
    config: &Config,
    http: Vec<(TcpListener, Option<Arc<rustls::ServerConfig>>)>,
    http_permits: &Arc<ConnLimiter>,
) {
    for (l, tls) in http {
        let addr = l.local_addr().ok();
        tracing::info!(
            "listening for queries on {}://{}",
            if tls.is_some() { "https" } else { "http" },
            addr.map(display_addr).unwrap_or_default()
        );
        let app = crate::front::http_server::router(node.clone());
        let limits = crate::front::http_server::HttpLimits {
            max_connections: config.limits.max_http_connections,
            idle_timeout: config.limits.http_idle_timeout,
        };
        let (t, tracker) = (node.token.child_token(), node.tracker.clone());
        let http_permits = http_permits.clone();
        node.tracker.spawn(async move {
            let served = crate::front::http_server::serve_limited(
                l,
                limits,
                http_permits,
                tls,
                app,
                t,
                tracker,
            );
            if let Err(e) = served.await {
                tracing::error!(error = %e, "http server failed");
            }
        });
    }
}

/// The TLS configuration of listener `l`, its files' errors naming the listener.
// Called once per listener at start, like `bind`: the error's size costs nothing.
#[allow(clippy::result_large_err)]
fn tls_server(
    l: &crate::model::config::TlsListenerConfig,
) -> Result<Arc<rustls::ServerConfig>, StartError> {
    crate::sys::tls::server_config(&l.cert, &l.key, l.client_ca.as_deref()).map_err(|source| {
        StartError::Tls {
            addr: l.addr,
            source,
        }
    })
}

/// A TCP listener on `addr` with the given accept backlog (the kernel caps it at
/// `net.core.somaxconn`); address reuse as `TcpListener::bind` sets it, so a restart binds
/// while old connections linger in TIME_WAIT.
// Called once per listener at start: the error's size costs nothing.
#[allow(clippy::result_large_err)]
fn bind(addr: SocketAddr, backlog: u32) -> Result<TcpListener, StartError> {
    let listen = || {
        let socket = if addr.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        socket.set_reuseaddr(true)?;
        socket.bind(addr)?;
        socket.listen(backlog)
    };
    listen().map_err(|source| StartError::Bind { addr, source })
}

/// A started node.
#[derive(Debug)]
pub struct RunningDaemon {
    node: Arc<Node>,
    listeners: Listeners,
    status: watch::Receiver<Status>,
    grace: Duration,
}

impl RunningDaemon {
    /// The node (state and operations).
    pub fn node(&self) -> &Arc<Node> {
        &self.node
    }

    /// Bound addresses.
    pub fn listeners(&self) -> &Listeners {
        &self.listeners
    }

    /// The first plain CIP listener's address.
    pub fn cip_addr(&self) -> Option<SocketAddr> {
        self.listeners.cip.first().copied()
    }

    /// The first HTTP listener's address.
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.listeners.http.first().copied()
    }

    /// The first HTTPS listener's address.
    pub fn https_addr(&self) -> Option<SocketAddr> {
        self.listeners.https.first().copied()
    }

    /// A receiver of status updates.
    pub fn status(&self) -> watch::Receiver<Status> {
        self.status.clone()
    }

    /// Waits until shutdown is requested (signal handler, admin, or [`Node::shutdown`]),
    /// then drains; returns true when everything finished within the grace period.
    pub async fn run_until_stopped(self) -> bool {
        self.node.token.cancelled().await;
        self.shutdown().await
    }

    /// Stops: cancels every task, lets in-flight requests finish within the grace period.
    /// Returns false when the grace period ran out.
    pub async fn shutdown(self) -> bool {
        crate::sys::notify::stopping();
        self.node.token.cancel();
        self.node.tracker.close();
        let done = tokio::time::timeout(self.grace, self.node.tracker.wait())
            .await
            .is_ok();
        peer::farewell(&self.node).await;
        if done {
            tracing::info!("shutdown complete");
        } else {
            tracing::warn!(grace = ?self.grace, "grace period ran out; abandoning in-flight work");
        }
        done
    }
}

impl Drop for RunningDaemon {
    fn drop(&mut self) {
        self.node.token.cancel();
    }
}
