//! The daemon's network seam ([`cipd::sys::net::Network`]) over turmoil's simulated TCP,
//! counting the bytes each node's out-going CIP connections carry.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use cipd::sys::net::{BoxConn, BoxFuture, Listener, Network};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Bytes and connections of one node's out-going CIP connections (its polls, pushes and
/// `datachanged` notices).
#[derive(Debug, Default)]
pub struct Traffic {
    /// Connections opened.
    pub connections: AtomicU64,
    /// Bytes read from them (a poll's hint arrives here).
    pub bytes_in: AtomicU64,
    /// Bytes written to them.
    pub bytes_out: AtomicU64,
}

/// turmoil's network as one node sees it.
#[derive(Debug, Clone)]
pub struct SimNet {
    /// This node's out-going traffic.
    pub traffic: Arc<Traffic>,
}

impl Network for SimNet {
    fn bind(&self, addr: SocketAddr) -> BoxFuture<'_, io::Result<Box<dyn Listener>>> {
        Box::pin(async move {
            let l = turmoil::net::TcpListener::bind(addr).await?;
            Ok(Box::new(SimListener(l)) as Box<dyn Listener>)
        })
    }

    fn connect<'a>(&'a self, host: &'a str, port: u16) -> BoxFuture<'a, io::Result<BoxConn>> {
        Box::pin(async move {
            let s = turmoil::net::TcpStream::connect((host, port)).await?;
            self.traffic.connections.fetch_add(1, Ordering::Relaxed);
            Ok(Box::new(Counted {
                inner: s,
                traffic: self.traffic.clone(),
            }) as BoxConn)
        })
    }
}

struct SimListener(turmoil::net::TcpListener);

impl Listener for SimListener {
    fn accept(&self) -> BoxFuture<'_, io::Result<(BoxConn, SocketAddr)>> {
        Box::pin(async move {
            let (s, a) = self.0.accept().await?;
            Ok((Box::new(s) as BoxConn, a))
        })
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.0.local_addr()
    }
}

/// A stream that adds what passes through it to a [`Traffic`].
struct Counted {
    inner: turmoil::net::TcpStream,
    traffic: Arc<Traffic>,
}

impl AsyncRead for Counted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        let n = (buf.filled().len() - before) as u64;
        self.traffic.bytes_in.fetch_add(n, Ordering::Relaxed);
        r
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = &r {
            self.traffic
                .bytes_out
                .fetch_add(*n as u64, Ordering::Relaxed);
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
