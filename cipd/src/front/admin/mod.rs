//! The admin socket: a Unix socket (mode 0600) speaking line-delimited JSON.
//!
//! [`bind`] creates the socket safely: a stale socket file left by a killed daemon is
//! replaced, a live daemon's socket or a file that is not a socket is never touched, and the
//! socket appears at its path already restricted to the owner (it is bound under a temporary
//! name, chmod-ed, then renamed into place). [`serve`] answers requests with an
//! [`AdminBackend`], one task per connection, until the shutdown token fires.

pub mod backend;
pub mod protocol;

use std::future::Future;
use std::io;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use crate::model::config::AdminLimits;
pub use protocol::{AdminError, AdminRequest, Envelope, PROTOCOL_VERSION, Response};

/// Answers admin commands; the daemon implements it over its state.
pub trait AdminBackend: Send + Sync + 'static {
    /// Carries out one command and returns its JSON result.
    fn handle(
        &self,
        request: AdminRequest,
    ) -> impl Future<Output = Result<serde_json::Value, AdminError>> + Send;
}

/// Why the admin socket could not be bound.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BindError {
    /// Another process answers on the socket.
    #[error("another process is listening on {0} (is cipd already running?)")]
    InUse(PathBuf),
    /// The path exists and is not a socket.
    #[error("{0} exists and is not a socket; refusing to replace it")]
    NotASocket(PathBuf),
    /// An I/O error, with what was being done.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
}

fn io_err(what: &'static str, path: &Path) -> impl FnOnce(io::Error) -> BindError + use<> {
    let path = path.to_owned();
    move |source| BindError::Io { what, path, source }
}

/// The default socket path: `$XDG_RUNTIME_DIR/cipd/admin.sock`, else
/// `/tmp/cipd-$USER/admin.sock`.
pub fn default_socket_path() -> PathBuf {
    if let Some(dir) = std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir).join("cipd/admin.sock");
    }
    let user = std::env::var("USER").unwrap_or_else(|_| "default".to_owned());
    PathBuf::from(format!("/tmp/cipd-{user}/admin.sock"))
}

/// Binds the admin socket at `path` with mode 0600, replacing a stale socket file.
///
/// The parent directory is created (mode 0700) if missing.
///
/// # Errors
/// [`BindError::InUse`] when a live process answers on the path, [`BindError::NotASocket`]
/// when the path is some other file, [`BindError::Io`] otherwise.
pub fn bind(path: &Path) -> Result<UnixListener, BindError> {
    if let Some(dir) = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty() && !d.exists())
    {
        std::fs::create_dir_all(dir).map_err(io_err("cannot create directory", dir))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(io_err("cannot set permissions of", dir))?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            match std::os::unix::net::UnixStream::connect(path) {
                Ok(_) => return Err(BindError::InUse(path.to_owned())),
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                    // Stale: nobody listens. Removed below by the rename over it.
                }
                Err(e) => return Err(io_err("cannot probe existing socket", path)(e)),
            }
        }
        Ok(_) => return Err(BindError::NotASocket(path.to_owned())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err("cannot inspect", path)(e)),
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".{}.tmp", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let _ = std::fs::remove_file(&tmp);
    let listener = UnixListener::bind(&tmp).map_err(io_err("cannot bind", &tmp))?;
    let placed = std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))
        .map_err(io_err("cannot set permissions of", &tmp))
        .and_then(|()| std::fs::rename(&tmp, path).map_err(io_err("cannot move socket to", path)));
    if let Err(e) = placed {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    Ok(listener)
}

/// Serves admin connections on `listener` until `shutdown` fires, then removes `path`.
pub async fn serve<B: AdminBackend>(
    listener: UnixListener,
    path: PathBuf,
    backend: Arc<B>,
    limits: AdminLimits,
    shutdown: CancellationToken,
    tracker: TaskTracker,
    counters: Arc<crate::sys::metrics::ListenerCounters>,
) {
    // A Unix socket has no source address: the overall limit only. Over it, the oldest
    // connection that has sent no whole request is closed for the new one (see conn_limit),
    // else the new one is closed at once, so the loop keeps draining the backlog.
    let slots = crate::front::conn_limit::ConnLimiter::total_only(
        "admin",
        limits.max_connections,
        counters,
    );
    loop {
        let stream = tokio::select! {
            res = listener.accept() => match res {
                Ok((stream, _)) => stream,
                Err(error) => {
                    tracing::warn!(%error, "admin accept failed");
                    // Out of descriptors and similar: pause instead of spinning.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = shutdown.cancelled() => break,
        };
        let permit = match slots.try_acquire(None) {
            Ok(p) => p,
            Err(why) => {
                slots.note_refusal(None, why);
                drop(stream);
                continue;
            }
        };
        let backend = backend.clone();
        let token = shutdown.clone();
        tracker.spawn(async move {
            let activity = permit.activity();
            tokio::select! {
                r = connection(stream, &*backend, limits, token, &activity) => {
                    if let Err(error) = r {
                        tracing::debug!(%error, "admin connection ended");
                    }
                }
                () = permit.evicted() => tracing::debug!("admin connection evicted for a new one"),
            }
            drop(permit);
        });
    }
    let _ = std::fs::remove_file(&path);
}

async fn connection<B: AdminBackend>(
    stream: UnixStream,
    backend: &B,
    limits: AdminLimits,
    shutdown: CancellationToken,
    activity: &crate::front::conn_limit::Activity,
) -> io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut read = BufReader::new(read);
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = tokio::select! {
            res = tokio::time::timeout(
                limits.idle_timeout,
                read_line(&mut read, &mut line, limits.max_request),
            ) => {
                match res {
                    Ok(res) => res?,
                    Err(_) => return Ok(()),
                }
            }
            () = shutdown.cancelled() => return Ok(()),
        };
        if n == 0 {
            return Ok(());
        }
        if !activity.begin() {
            return Ok(());
        }
        let response = match parse_request(&line) {
            Ok(request) => match backend.handle(request).await {
                Ok(result) => Response::ok(result),
                Err(e) => Response::error(&e),
            },
            Err(e) => Response::error(&e),
        };
        // Serializing plain data into a Vec cannot fail.
        let mut out = serde_json::to_vec(&response).unwrap_or_default();
        out.push(b'\n');
        // A client that reads nothing is dropped after the idle timeout.
        tokio::time::timeout(limits.idle_timeout, write.write_all(&out))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "admin answer not read"))??;
        activity.end();
    }
}

/// Reads one line of at most `max` bytes; 0 at end of input.
async fn read_line<R: AsyncBufReadExt + Unpin>(
    r: &mut R,
    line: &mut Vec<u8>,
    max: usize,
) -> io::Result<usize> {
    loop {
        let buf = r.fill_buf().await?;
        if buf.is_empty() {
            return Ok(line.len());
        }
        let (take, done) = match memchr::memchr(b'\n', buf) {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        if line.len() + take > max {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "admin request line too long",
            ));
        }
        line.extend_from_slice(&buf[..take]);
        r.consume(take);
        if done {
            return Ok(line.len());
        }
    }
}

fn parse_request(line: &[u8]) -> Result<AdminRequest, AdminError> {
    let value: serde_json::Value =
        serde_json::from_slice(line).map_err(|e| AdminError::BadRequest(e.to_string()))?;
    let version = value.get("version").and_then(serde_json::Value::as_u64);
    match version {
        Some(v) if v == u64::from(PROTOCOL_VERSION) => {}
        Some(v) => {
            return Err(AdminError::Version {
                got: u32::try_from(v).unwrap_or(u32::MAX),
            });
        }
        None => return Err(AdminError::BadRequest("missing \"version\"".into())),
    }
    let env: Envelope =
        serde_json::from_value(value).map_err(|e| AdminError::BadRequest(e.to_string()))?;
    Ok(env.request)
}

/// Sends one request to the admin socket at `path` and returns the daemon's response.
///
/// # Errors
/// I/O errors connecting, writing or reading; a response that is not valid JSON.
pub async fn request(path: &Path, request: &AdminRequest) -> io::Result<Response> {
    let stream = UnixStream::connect(path).await?;
    let (read, mut write) = stream.into_split();
    let env = Envelope {
        version: PROTOCOL_VERSION,
        request: request.clone(),
    };
    let mut line = serde_json::to_vec(&env).map_err(io::Error::other)?;
    line.push(b'\n');
    write.write_all(&line).await?;
    let mut reader = BufReader::new(read);
    let mut buf = String::new();
    reader.read_line(&mut buf).await?;
    if buf.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the daemon closed the connection",
        ));
    }
    serde_json::from_str(&buf).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    struct Echo;
    impl AdminBackend for Echo {
        async fn handle(&self, request: AdminRequest) -> Result<serde_json::Value, AdminError> {
            match request {
                AdminRequest::Poll { peer } => Err(AdminError::UnknownPeer(peer)),
                other => Ok(serde_json::to_value(&other).unwrap_or_default()),
            }
        }
    }

    #[tokio::test]
    async fn socket_mode_stale_replacement_and_requests() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run/admin.sock");
        // A stale socket: bound, then its listener dropped.
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        let listener = bind(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        // A second daemon must not steal a live socket.
        assert!(matches!(bind(&path), Err(BindError::InUse(_))));

        let token = CancellationToken::new();
        let tracker = TaskTracker::new();
        let server = tokio::spawn(serve(
            listener,
            path.clone(),
            Arc::new(Echo),
            AdminLimits::default(),
            token.clone(),
            tracker.clone(),
            Arc::default(),
        ));
        let r = request(&path, &AdminRequest::Status).await.unwrap();
        assert!(r.ok);
        assert_eq!(r.result, Some(json!({"command": "status"})));
        let r = request(&path, &AdminRequest::Poll { peer: "x".into() })
            .await
            .unwrap();
        assert!(!r.ok);
        assert_eq!(r.error.unwrap().kind, "unknown-peer");

        // Raw lines: bad JSON, wrong version, two requests on one connection.
        let stream = UnixStream::connect(&path).await.unwrap();
        let (read, mut write) = stream.into_split();
        write
            .write_all(b"not json\n{\"version\":9,\"command\":\"status\"}\n{\"version\":1,\"command\":\"reload\"}\n")
            .await
            .unwrap();
        let mut lines = BufReader::new(read).lines();
        let kinds: Vec<String> = [
            lines.next_line().await.unwrap().unwrap(),
            lines.next_line().await.unwrap().unwrap(),
            lines.next_line().await.unwrap().unwrap(),
        ]
        .iter()
        .map(|l| {
            let r: Response = serde_json::from_str(l).unwrap();
            r.error.map_or_else(|| "ok".to_owned(), |e| e.kind)
        })
        .collect();
        assert_eq!(kinds, ["bad-request", "version", "ok"]);

        token.cancel();
        server.await.unwrap();
        tracker.close();
        tracker.wait().await;
        assert!(!path.exists(), "socket removed at shutdown");
    }

    #[tokio::test]
    async fn an_over_long_request_line_closes_the_connection() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("admin.sock");
        let listener = bind(&path).unwrap();
        let limits = AdminLimits {
            max_request: 64,
            ..AdminLimits::default()
        };
        let (token, tracker) = (CancellationToken::new(), TaskTracker::new());
        let server = tokio::spawn(serve(
            listener,
            path.clone(),
            Arc::new(Echo),
            limits,
            token.clone(),
            tracker.clone(),
            Arc::default(),
        ));
        // Within the limit: answered.
        assert!(request(&path, &AdminRequest::Status).await.unwrap().ok);
        // Past it: closed without an answer, before the line is buffered whole.
        let stream = UnixStream::connect(&path).await.unwrap();
        let (read, mut write) = stream.into_split();
        let long = format!(
            "{{\"version\":1,\"command\":\"status\",\"x\":\"{}\"}}\n",
            "a".repeat(200)
        );
        let _ = write.write_all(long.as_bytes()).await;
        let mut answer = String::new();
        let n = BufReader::new(read)
            .read_line(&mut answer)
            .await
            .unwrap_or(0);
        assert_eq!(n, 0, "no answer to an over-long line: {answer}");
        token.cancel();
        server.await.unwrap();
        tracker.close();
        tracker.wait().await;
    }

    #[tokio::test]
    async fn connections_over_the_limit_are_closed_and_slow_lines_time_out() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("admin.sock");
        let listener = bind(&path).unwrap();
        let limits = AdminLimits {
            max_connections: 2,
            idle_timeout: Duration::from_secs(2),
            ..AdminLimits::default()
        };
        let (token, tracker) = (CancellationToken::new(), TaskTracker::new());
        let server = tokio::spawn(serve(
            listener,
            path.clone(),
            Arc::new(Echo),
            limits,
            token.clone(),
            tracker.clone(),
            Arc::default(),
        ));
        // Two clients drip half a line each and hold both slots.
        let mut drips = Vec::new();
        for _ in 0..2 {
            let mut s = UnixStream::connect(&path).await.unwrap();
            s.write_all(b"{\"version\":").await.unwrap();
            drips.push(s);
        }
        // A third is closed at once without an answer to its request, while the slots are
        // held (the drips are closed only after the idle timeout).
        let mut third = UnixStream::connect(&path).await.unwrap();
        let _ = third
            .write_all(b"{\"version\":1,\"command\":\"status\"}\n")
            .await;
        let mut answer = String::new();
        let n = tokio::time::timeout(
            Duration::from_secs(10),
            BufReader::new(third).read_line(&mut answer),
        )
        .await
        .unwrap()
        .unwrap_or(0);
        assert_eq!(n, 0, "{answer}");
        // The drips never finish their line: closed after the idle timeout.
        for s in drips {
            let mut answer = String::new();
            let n = tokio::time::timeout(
                Duration::from_secs(10),
                BufReader::new(s).read_line(&mut answer),
            )
            .await
            .expect("a dripping client is closed")
            .unwrap_or(0);
            assert_eq!(n, 0, "{answer}");
        }
        // The slots came back.
        assert!(request(&path, &AdminRequest::Status).await.unwrap().ok);
        token.cancel();
        server.await.unwrap();
        tracker.close();
        tracker.wait().await;
    }

    #[test]
    fn refuses_to_replace_other_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("admin.sock");
        std::fs::write(&path, b"data").unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _guard = rt.enter();
        assert!(matches!(bind(&path), Err(BindError::NotASocket(_))));
        assert_eq!(std::fs::read(&path).unwrap(), b"data");
    }
}
