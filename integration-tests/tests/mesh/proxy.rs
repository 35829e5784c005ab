//! A fault-injecting TCP proxy for the mesh tests: listens on 127.0.0.1:0 and forwards each
//! connection to one target, while the test cuts, stalls, slows or resets the link.
//!
//! * [`Proxy::cut`]: existing connections are closed (FIN) and new ones are accepted only to
//!   be reset at once (`SO_LINGER` 0), so a poller's connect fails like a refused one, while
//!   the proxy still sees (and records) each attempt;
//! * [`Proxy::stall`]: connections stay open but no byte is forwarded either way; what
//!   arrives is held and forwarded once the link is restored;
//! * [`Proxy::slow`]: at most N bytes per second in each direction of each connection;
//! * [`Proxy::reset`]: every existing connection is reset (RST) now; the mode is kept;
//! * [`Proxy::restore`]: forward normally again.
//!
//! Every accepted connection is recorded ([`Conn`]): when it was accepted, in which mode,
//! when its client closed it, the bytes forwarded each way, and how the proxy ended it.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// How the proxy treats the bytes of its connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Forward everything.
    Pass,
    /// Forward nothing; hold what arrives.
    Stall,
    /// Forward at most this many bytes per second per direction.
    Slow(u64),
    /// Refuse (reset) new connections.
    Cut,
}

#[derive(Debug, Clone, Copy)]
struct Control {
    mode: Mode,
    /// Bumped by [`Proxy::reset`]: connections accepted before are reset.
    resets: u64,
    /// Bumped by [`Proxy::cut`]: connections accepted before are closed.
    cuts: u64,
}

/// One connection as the proxy saw it.
#[derive(Debug, Clone)]
pub struct Conn {
    /// When the proxy accepted it.
    pub accepted: Instant,
    /// The mode at that moment.
    pub mode: Mode,
    /// When the client's side ended (EOF or error), if it did.
    pub client_closed: Option<Instant>,
    /// Bytes forwarded client to target.
    pub up: u64,
    /// Bytes forwarded target to client.
    pub down: u64,
    /// `refused` (accepted during a cut), `cut`, `reset` or `target unreachable`, when the
    /// proxy ended it.
    pub killed: Option<&'static str>,
}

type Conns = Arc<Mutex<Vec<Conn>>>;

/// The proxy; dropping it stops it and closes its connections.
pub struct Proxy {
    addr: SocketAddr,
    ctl: watch::Sender<Control>,
    conns: Conns,
    accept: tokio::task::JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        // Every connection task ends when it sees the sender gone.
    }
}

impl Proxy {
    /// A proxy to `target`, forwarding normally.
    pub async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (ctl, rx) = watch::channel(Control {
            mode: Mode::Pass,
            resets: 0,
            cuts: 0,
        });
        let conns: Conns = Arc::default();
        let accept = tokio::spawn(accept_loop(listener, target, rx, conns.clone()));
        Self {
            addr,
            ctl,
            conns,
            accept,
        }
    }

    /// Where peers connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Closes existing connections and refuses new ones until [`Proxy::restore`].
    pub fn cut(&self) {
        self.ctl.send_modify(|c| {
            c.mode = Mode::Cut;
            c.cuts += 1;
        });
    }

    /// Stops forwarding, keeping connections open.
    pub fn stall(&self) {
        self.ctl.send_modify(|c| c.mode = Mode::Stall);
    }

    /// Forwards at most `bytes_per_second` per direction of each connection.
    pub fn slow(&self, bytes_per_second: u64) {
        assert!(bytes_per_second > 0);
        self.ctl
            .send_modify(|c| c.mode = Mode::Slow(bytes_per_second));
    }

    /// Resets (RST) every connection open now; the mode stays.
    pub fn reset(&self) {
        self.ctl.send_modify(|c| c.resets += 1);
    }

    /// Forwards normally again.
    pub fn restore(&self) {
        self.ctl.send_modify(|c| c.mode = Mode::Pass);
    }

    /// Every connection accepted so far, oldest first.
    pub fn conns(&self) -> Vec<Conn> {
        self.conns.lock().unwrap().clone()
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.conns.lock().unwrap().len()
    }
}

async fn accept_loop(
    listener: TcpListener,
    target: SocketAddr,
    ctl: watch::Receiver<Control>,
    conns: Conns,
) {
    loop {
        let Ok((sock, _)) = listener.accept().await else {
            continue;
        };
        let now = *ctl.borrow();
        let idx = {
            let mut c = conns.lock().unwrap();
            c.push(Conn {
                accepted: Instant::now(),
                mode: now.mode,
                client_closed: None,
                up: 0,
                down: 0,
                killed: None,
            });
            c.len() - 1
        };
        if now.mode == Mode::Cut {
            conns.lock().unwrap()[idx].killed = Some("refused");
            let _ = sock.set_zero_linger();
            drop(sock);
            continue;
        }
        tokio::spawn(serve(sock, target, ctl.clone(), now, conns.clone(), idx));
    }
}

#[derive(Clone, Copy)]
enum Kill {
    Reset,
    Cut,
    Gone,
}

/// Resolves when a reset or cut comes after `start`, or the proxy is gone.
async fn killed(mut ctl: watch::Receiver<Control>, start: Control) -> Kill {
    loop {
        {
            let c = *ctl.borrow_and_update();
            if c.resets > start.resets {
                return Kill::Reset;
            }
            if c.cuts > start.cuts {
                return Kill::Cut;
            }
        }
        if ctl.changed().await.is_err() {
            return Kill::Gone;
        }
    }
}

async fn serve(
    client: TcpStream,
    target: SocketAddr,
    ctl: watch::Receiver<Control>,
    start: Control,
    conns: Conns,
    idx: usize,
) {
    let server = match TcpStream::connect(target).await {
        Ok(s) => s,
        Err(_) => {
            conns.lock().unwrap()[idx].killed = Some("target unreachable");
            let _ = client.set_zero_linger();
            return;
        }
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let kill = tokio::select! {
        _ = async {
            tokio::join!(
                pump(&mut cr, &mut sw, ctl.clone(), &conns, idx, true),
                pump(&mut sr, &mut cw, ctl.clone(), &conns, idx, false),
            )
        } => None,
        k = killed(ctl.clone(), start) => Some(k),
    };
    match kill {
        Some(Kill::Reset) => {
            conns.lock().unwrap()[idx].killed = Some("reset");
            // Whole streams again: a dropped write half would send a FIN first.
            for stream in [cr.reunite(cw), sr.reunite(sw)].into_iter().flatten() {
                let _ = stream.set_zero_linger();
            }
        }
        Some(Kill::Cut) => conns.lock().unwrap()[idx].killed = Some("cut"),
        Some(Kill::Gone) | None => {}
    }
    // Dropping closes both sockets: FIN, or RST when lingering 0.
}

/// Copies `from` to `to` as the mode says, until `from` ends and what it sent is passed on.
async fn pump(
    from: &mut OwnedReadHalf,
    to: &mut OwnedWriteHalf,
    mut ctl: watch::Receiver<Control>,
    conns: &Conns,
    idx: usize,
    up: bool,
) {
    let mut buf = vec![0u8; 16 * 1024];
    let mut held: Vec<u8> = Vec::new();
    let mut eof = false;
    let note_eof = || {
        if up {
            conns.lock().unwrap()[idx].client_closed = Some(Instant::now());
        }
    };
    loop {
        let mode = ctl.borrow_and_update().mode;
        match mode {
            Mode::Stall | Mode::Cut => {
                // Hold: keep reading (to notice the client leave), forward nothing.
                if eof {
                    if ctl.changed().await.is_err() {
                        return;
                    }
                    continue;
                }
                tokio::select! {
                    r = from.read(&mut buf) => match r {
                        Ok(0) | Err(_) => {
                            eof = true;
                            note_eof();
                        }
                        Ok(n) => held.extend_from_slice(&buf[..n]),
                    },
                    c = ctl.changed() => if c.is_err() { return },
                }
            }
            Mode::Pass | Mode::Slow(_) => {
                if !held.is_empty() {
                    let n = match mode {
                        Mode::Slow(rate) => {
                            usize::try_from((rate / 20).max(1)).unwrap_or(usize::MAX)
                        }
                        _ => held.len(),
                    }
                    .min(held.len());
                    if to.write_all(&held[..n]).await.is_err() {
                        return;
                    }
                    held.drain(..n);
                    {
                        let mut c = conns.lock().unwrap();
                        if up {
                            c[idx].up += n as u64;
                        } else {
                            c[idx].down += n as u64;
                        }
                    }
                    if let Mode::Slow(rate) = mode {
                        tokio::time::sleep(Duration::from_secs_f64(n as f64 / rate as f64)).await;
                    }
                    continue;
                }
                if eof {
                    let _ = to.shutdown().await;
                    return;
                }
                tokio::select! {
                    r = from.read(&mut buf) => match r {
                        Ok(0) | Err(_) => {
                            eof = true;
                            note_eof();
                        }
                        Ok(n) => held.extend_from_slice(&buf[..n]),
                    },
                    // A mode change while idle: look again (a stall must hold what comes).
                    c = ctl.changed() => if c.is_err() { return },
                }
            }
        }
    }
}
