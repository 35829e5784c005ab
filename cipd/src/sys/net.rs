//! The network seam: where the CIP stream transport binds and connects, and whether work
//! that normally runs on threads of its own runs inline.
//!
//! A production daemon uses the host's TCP stack ([`Accepted::Tcp`] streams, tokio's
//! listener) and never looks at this module's traits. A deterministic simulator (the
//! `cipd-sim` tool, on `turmoil`) hands the daemon a [`Network`] instead: the daemon then
//! binds its plain CIP listeners and opens its CIP connections (polls, pushes,
//! `datachanged`) through it, and sets [`set_inline`] so that blocking work runs on the
//! simulated host's own thread, in an order the simulator controls, instead of on real
//! threads that run while simulated time stands still.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

/// A byte stream a connection can run over.
pub trait Conn: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Conn for T {}

/// A boxed [`Conn`].
pub type BoxConn = Box<dyn Conn>;

/// A boxed, sendable future (the traits below are object-safe).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A network other than the host's TCP stack, for the CIP stream transport.
pub trait Network: Send + Sync + 'static {
    /// Binds a listener on `addr`.
    fn bind(&self, addr: SocketAddr) -> BoxFuture<'_, io::Result<Box<dyn Listener>>>;
    /// Connects to `host` (a name or an address literal) on `port`.
    fn connect<'a>(&'a self, host: &'a str, port: u16) -> BoxFuture<'a, io::Result<BoxConn>>;
}

impl std::fmt::Debug for dyn Network {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Network")
    }
}

/// A listener bound on a [`Network`].
pub trait Listener: Send + Sync {
    /// The next connection and its remote address.
    fn accept(&self) -> BoxFuture<'_, io::Result<(BoxConn, SocketAddr)>>;
    /// The bound address.
    ///
    /// # Errors
    /// As the network's.
    fn local_addr(&self) -> io::Result<SocketAddr>;
}

/// A connection taken from a listener: the host's TCP or a [`Network`]'s.
pub enum Accepted {
    /// From a tokio TCP listener.
    Tcp(TcpStream),
    /// From a [`Network`] listener.
    Net(BoxConn),
}

impl std::fmt::Debug for Accepted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Tcp(s) => f.debug_tuple("Tcp").field(s).finish(),
            Self::Net(_) => f.write_str("Net"),
        }
    }
}

impl AsyncRead for Accepted {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Self::Net(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Accepted {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Self::Net(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Tcp(s) => Pin::new(s).poll_flush(cx),
            Self::Net(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Self::Net(s) => Pin::new(s).poll_shutdown(cx),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Tcp(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Self::Net(s) => Pin::new(s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Self::Tcp(s) => s.is_write_vectored(),
            Self::Net(s) => s.is_write_vectored(),
        }
    }
}

/// A bound listener: the host's TCP or a [`Network`]'s.
pub enum Bound {
    /// A tokio TCP listener.
    Tcp(tokio::net::TcpListener),
    /// A [`Network`] listener.
    Net(Box<dyn Listener>),
}

impl std::fmt::Debug for Bound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Tcp(l) => f.debug_tuple("Tcp").field(l).finish(),
            Self::Net(_) => f.write_str("Net"),
        }
    }
}

impl Bound {
    /// The next connection and its remote address.
    ///
    /// # Errors
    /// The listener's accept error.
    pub async fn accept(&self) -> io::Result<(Accepted, SocketAddr)> {
        match self {
            Self::Tcp(l) => l.accept().await.map(|(s, a)| (Accepted::Tcp(s), a)),
            Self::Net(l) => l.accept().await.map(|(s, a)| (Accepted::Net(s), a)),
        }
    }

    /// The bound address.
    ///
    /// # Errors
    /// As the listener's.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        match self {
            Self::Tcp(l) => l.local_addr(),
            Self::Net(l) => l.local_addr(),
        }
    }
}

static INLINE: AtomicBool = AtomicBool::new(false);

/// Makes [`spawn_blocking`] and the daemon's worker threads run their work as tasks on the
/// current runtime (for a simulator, whose hosts each run on one thread with paused time);
/// process-wide. A production daemon never sets it.
pub fn set_inline(on: bool) {
    INLINE.store(on, Ordering::Release);
}

/// Whether [`set_inline`] is on.
pub fn inline() -> bool {
    INLINE.load(Ordering::Acquire)
}

/// `tokio::task::spawn_blocking`, or under [`set_inline`] a task on the current runtime
/// that runs `f` when first polled.
pub fn spawn_blocking<F, R>(f: F) -> JoinHandle<R>
where
    F: FnOnce() -> R + Send + 'static,
    R: Send + 'static,
{
    if inline() {
        tokio::spawn(async move { f() })
    } else {
        tokio::task::spawn_blocking(f)
    }
}
