//! The fault-injecting proxy in front of each node of the real run: it stands where the
//! network would, inside the node's own namespace, listening on the node's address and
//! port 7000 and forwarding to the node's daemon on port 7001.
//!
//! * **Transparent**: the connection to the daemon is made from the client's own address
//!   (`IP_TRANSPARENT`, with a routing rule that delivers the daemon's replies locally, set
//!   up by [`super::lab`]), so the daemon still knows its peers by address, as it must to
//!   take their `datachanged` notices.
//! * **Latency**: every chunk read is delivered after a one-way delay drawn uniformly from
//!   the configured range, in order, in each direction, as turmoil delays each message.
//! * **Loss**: a chunk is "lost" with the configured probability and delivered one
//!   retransmission timeout (default 200 ms, Linux's least) late, as TCP would after a
//!   retransmission.
//! * **Control**, one command per line on standard input, each answered by one line on
//!   standard output (`ok`, `stats {json}` or `error ...`): `go` releases the start gate
//!   (until then connections are accepted and held, so that every node starts at the same
//!   instant as in the simulation); `cut IP` holds every byte from or to IP (a partition:
//!   connections stall and TCP delivers what was held once healed, if the daemon has not
//!   given up), `drop IP` silently discards every byte from or to IP (a blackhole: no
//!   reset, no refusal, nothing delivered later), `heal IP` lets them flow again after
//!   either; `slow IP MS` gives IP's connections a fixed
//!   one-way latency, `fast IP` takes it back; `stats` prints per client address the
//!   connections forwarded and bytes carried each way. End of input stops the proxy.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// How the proxy is set up.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// Where clients connect (the node's address, port 7000).
    pub listen: SocketAddr,
    /// The daemon (the node's address, port 7001).
    pub target: SocketAddr,
    /// One-way latency, least and most.
    pub latency: (Duration, Duration),
    /// Chance that a chunk is lost and delivered `rto` late.
    pub loss: f64,
    /// Retransmission timeout of a lost chunk.
    pub rto: Duration,
    /// Seeds the latency and loss draws.
    pub seed: u64,
}

/// What the control commands set.
#[derive(Debug, Clone, Default)]
struct Control {
    released: bool,
    cut: BTreeSet<IpAddr>,
    dropped: BTreeSet<IpAddr>,
    slow: BTreeMap<IpAddr, Duration>,
}

impl Control {
    fn flows(&self, ip: IpAddr) -> bool {
        self.released && !self.cut.contains(&ip)
    }
}

/// Per client address: connections forwarded, bytes to the client, bytes from it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Connections made to the daemon for it.
    pub connections: u64,
    /// Bytes the daemon sent it.
    pub down: u64,
    /// Bytes it sent the daemon.
    pub up: u64,
}

type Stats = Arc<Mutex<BTreeMap<IpAddr, Traffic>>>;

fn add(stats: &Stats, ip: IpAddr, f: impl FnOnce(&mut Traffic)) {
    let mut map = stats
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    f(map.entry(ip).or_default());
}

/// Formats the `stats` answer: `stats IP CONNS DOWN UP;IP CONNS DOWN UP;...`.
pub fn format_stats(stats: &BTreeMap<IpAddr, Traffic>) -> String {
    let items: Vec<String> = stats
        .iter()
        .map(|(ip, t)| format!("{ip} {} {} {}", t.connections, t.down, t.up))
        .collect();
    format!("stats {}", items.join(";"))
}

/// Parses a `stats` answer (see [`format_stats`]).
pub fn parse_stats(line: &str) -> Option<BTreeMap<IpAddr, Traffic>> {
    let rest = line.strip_prefix("stats")?.trim();
    let mut out = BTreeMap::new();
    for item in rest.split(';').filter(|s| !s.trim().is_empty()) {
        let mut w = item.split_whitespace();
        let ip: IpAddr = w.next()?.parse().ok()?;
        let t = Traffic {
            connections: w.next()?.parse().ok()?,
            down: w.next()?.parse().ok()?,
            up: w.next()?.parse().ok()?,
        };
        out.insert(ip, t);
    }
    Some(out)
}

/// Binds, prints `ready`, serves until standard input ends.
///
/// # Errors
/// When the listener cannot be bound.
pub async fn run(config: ProxyConfig) -> io::Result<()> {
    let listener = TcpListener::bind(config.listen).await?;
    let (ctl, _) = watch::channel(Control::default());
    let ctl = Arc::new(ctl);
    let stats: Stats = Arc::default();
    println!("ready {}", config.listen);
    let accept = {
        let (ctl, stats, config) = (ctl.clone(), stats.clone(), config.clone());
        tokio::spawn(async move {
            let mut k = 0u64;
            loop {
                match listener.accept().await {
                    Ok((client, from)) => {
                        k += 1;
                        let rng = fastrand::Rng::with_seed(config.seed ^ k.wrapping_mul(31));
                        let conn = Conn {
                            ctl: ctl.subscribe(),
                            stats: stats.clone(),
                            target: config.target,
                            latency: config.latency,
                            loss: config.loss,
                            rto: config.rto,
                        };
                        tokio::spawn(conn.serve(client, from.ip(), rng));
                    }
                    Err(e) => {
                        eprintln!("cipd-sim-proxy: accept: {e}");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            }
        })
    };
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = lines.next_line().await? {
        let answer = command(&ctl, &stats, line.trim());
        println!("{answer}");
    }
    accept.abort();
    Ok(())
}

fn command(ctl: &watch::Sender<Control>, stats: &Stats, line: &str) -> String {
    let mut words = line.split_whitespace();
    let verb = words.next().unwrap_or("");
    let ip = words.next().map(str::parse::<IpAddr>);
    let arg = words.next().map(str::parse::<u64>);
    match (verb, ip, arg) {
        ("go", None, None) => ctl.send_modify(|c| c.released = true),
        ("cut", Some(Ok(ip)), None) => ctl.send_modify(|c| {
            c.cut.insert(ip);
        }),
        ("drop", Some(Ok(ip)), None) => ctl.send_modify(|c| {
            c.dropped.insert(ip);
        }),
        ("heal", Some(Ok(ip)), None) => ctl.send_modify(|c| {
            c.cut.remove(&ip);
            c.dropped.remove(&ip);
        }),
        ("slow", Some(Ok(ip)), Some(Ok(ms))) => ctl.send_modify(|c| {
            c.slow.insert(ip, Duration::from_millis(ms));
        }),
        ("fast", Some(Ok(ip)), None) => ctl.send_modify(|c| {
            c.slow.remove(&ip);
        }),
        ("stats", None, None) => {
            let map = stats
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone();
            return format_stats(&map);
        }
        _ => {
            return format!(
                "error {line:?}: expected go, cut IP, drop IP, heal IP, slow IP MS, fast IP or stats"
            );
        }
    }
    "ok".to_owned()
}

/// One client connection.
struct Conn {
    ctl: watch::Receiver<Control>,
    stats: Stats,
    target: SocketAddr,
    latency: (Duration, Duration),
    loss: f64,
    rto: Duration,
}

/// A chunk on its way, or the end of a direction.
enum Chunk {
    Data(Instant, Vec<u8>),
    Eof(Instant),
}

impl Conn {
    async fn serve(mut self, client: TcpStream, ip: IpAddr, rng: fastrand::Rng) {
        // Held at the gate or by a cut: the client's bytes wait in its socket.
        if self.ctl.wait_for(|c| c.flows(ip)).await.is_err() {
            return;
        }
        let upstream = match connect_from(ip, self.target).await {
            Ok(s) => s,
            Err(e) => {
                // The daemon is down (crashed): the client sees a reset, as from a closed
                // port.
                eprintln!("cipd-sim-proxy: {ip} -> {}: {e}", self.target);
                let _ = socket2::SockRef::from(&client).set_linger(Some(Duration::ZERO));
                return;
            }
        };
        add(&self.stats, ip, |t| t.connections += 1);
        let _ = client.set_nodelay(true);
        let _ = upstream.set_nodelay(true);
        let (cr, cw) = client.into_split();
        let (ur, uw) = upstream.into_split();
        let rng = Arc::new(Mutex::new(rng));
        let up = self.direction(cr, uw, ip, rng.clone(), false);
        let down = self.direction(ur, cw, ip, rng, true);
        tokio::join!(up, down);
    }

    /// Carries one direction: a reader stamps each chunk with its delivery time, a writer
    /// delivers it then (and not while the link is cut).
    async fn direction(
        &self,
        mut from: OwnedReadHalf,
        mut to: OwnedWriteHalf,
        ip: IpAddr,
        rng: Arc<Mutex<fastrand::Rng>>,
        down: bool,
    ) {
        let (tx, mut rx) = mpsc::channel::<Chunk>(64);
        let ctl = self.ctl.clone();
        let (latency, loss, rto) = (self.latency, self.loss, self.rto);
        let reader = async move {
            let mut last = Instant::now();
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let n = from.read(&mut buf).await.unwrap_or(0);
                let delay = {
                    let mut rng = rng
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    let fixed = ctl.borrow().slow.get(&ip).copied();
                    let d = fixed.unwrap_or_else(|| {
                        let span = latency.1.saturating_sub(latency.0).as_micros() as u64;
                        latency.0 + Duration::from_micros(rng.u64(0..=span))
                    });
                    if loss > 0.0 && rng.f64() < loss {
                        d + rto
                    } else {
                        d
                    }
                };
                last = last.max(Instant::now() + delay);
                if n == 0 {
                    let _ = tx.send(Chunk::Eof(last)).await;
                    return;
                }
                if tx.send(Chunk::Data(last, buf[..n].to_vec())).await.is_err() {
                    return;
                }
            }
        };
        let mut ctl = self.ctl.clone();
        let stats = self.stats.clone();
        let writer = async move {
            while let Some(chunk) = rx.recv().await {
                let (at, data) = match chunk {
                    Chunk::Data(at, d) => (at, Some(d)),
                    Chunk::Eof(at) => (at, None),
                };
                tokio::time::sleep_until(at).await;
                if ctl.wait_for(|c| c.flows(ip)).await.is_err() {
                    return;
                }
                if ctl.borrow().dropped.contains(&ip) {
                    // Blackholed: lost on the way, and never sent again.
                    continue;
                }
                let Some(data) = data else {
                    let _ = to.shutdown().await;
                    return;
                };
                if to.write_all(&data).await.is_err() {
                    return;
                }
                let n = data.len() as u64;
                add(&stats, ip, |t| if down { t.down += n } else { t.up += n });
            }
        };
        tokio::join!(reader, writer);
    }
}

/// A connection to `target` from the address `ip` (not this host's own: `IP_TRANSPARENT`).
async fn connect_from(ip: IpAddr, target: SocketAddr) -> io::Result<TcpStream> {
    let domain = socket2::Domain::for_address(target);
    let socket = socket2::Socket::new(domain, socket2::Type::STREAM, Some(socket2::Protocol::TCP))?;
    match ip {
        IpAddr::V4(_) => socket.set_ip_transparent_v4(true)?,
        IpAddr::V6(_) => socket.set_ip_transparent_v6(true)?,
    }
    socket.bind(&SocketAddr::new(ip, 0).into())?;
    socket.set_nonblocking(true)?;
    let std: std::net::TcpStream = socket.into();
    TcpSocket::from_std_stream(std).connect(target).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_round_trip() {
        let mut m = BTreeMap::new();
        m.insert(
            "10.77.0.2".parse().unwrap(),
            Traffic {
                connections: 3,
                down: 1200,
                up: 80,
            },
        );
        m.insert("10.77.1.4".parse().unwrap(), Traffic::default());
        assert_eq!(parse_stats(&format_stats(&m)), Some(m));
        assert_eq!(parse_stats("stats "), Some(BTreeMap::new()));
        assert_eq!(parse_stats("ok"), None);
    }

    #[test]
    fn commands_set_the_control_and_refuse_nonsense() {
        let (ctl, rx) = watch::channel(Control::default());
        let stats: Stats = Arc::default();
        let ip: IpAddr = "10.77.0.9".parse().unwrap();
        assert!(!rx.borrow().flows(ip));
        assert_eq!(command(&ctl, &stats, "go"), "ok");
        assert!(rx.borrow().flows(ip));
        assert_eq!(command(&ctl, &stats, "cut 10.77.0.9"), "ok");
        assert!(!rx.borrow().flows(ip));
        assert_eq!(command(&ctl, &stats, "heal 10.77.0.9"), "ok");
        assert_eq!(command(&ctl, &stats, "slow 10.77.0.9 250"), "ok");
        assert_eq!(rx.borrow().slow.get(&ip), Some(&Duration::from_millis(250)));
        assert_eq!(command(&ctl, &stats, "fast 10.77.0.9"), "ok");
        assert!(rx.borrow().slow.is_empty());
        assert_eq!(command(&ctl, &stats, "stats"), "stats ");
        assert!(command(&ctl, &stats, "cut nowhere").starts_with("error"));
        assert!(command(&ctl, &stats, "slow 10.77.0.9").starts_with("error"));
        assert!(command(&ctl, &stats, "go now").starts_with("error"));
    }
}
