//! Connection state machines of RFC 2653 §2.1: the receiver ([`serve_connection`]) and the
//! sender ([`CipClient`], [`CipConnection`]), over any byte stream.

use std::sync::Arc;
use std::time::Duration;

use crate::sys::net::{Conn as NetConn, Network};
use bytes::{BufMut, BytesMut};
use cip_proto::cip::stream::{CIP_VERSION, encode_status};
use cip_proto::cip::{
    CipCodec, Expect, Frame, Limits, PollResult, Request, ResponseCode, Status, StreamError,
};
use rustls_pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, ToSocketAddrs};
use tokio::time::{Instant, timeout_at};
use tokio_util::codec::{Decoder, Encoder};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::handler::{
    ConnHooks, PeerContext, Phase, Reply, RequestHandler, TransportConfig, TransportError, Watch,
};

/// Read-buffer growth step.
const READ_CHUNK: usize = 64 * 1024;

/// The read buffer of a frame's first read: most requests and answers are a few hundred
/// bytes, and an idle connection holds no more than this (its buffer is dropped after each
/// exchange). Larger frames grow it geometrically from here.
const FIRST_READ: usize = 1024;

/// Serves one connection as the receiver-CIP (RFC 2653 §2.1).
///
/// Sends the `220` banner, accepts `# CIP-Version: 3` (also when the first request follows
/// without waiting, i.e. pipelined) with `300`, then answers requests with `handler` until
/// the sender half-closes (`222`). A sender that asks for another version, or sends anything
/// else first, gets `500` and the connection is closed (digest A23). Requests that do not
/// parse get 500/501/502 with the reason as comment and the connection stays usable.
/// A timeout sends `% 520` naming it, then closes; a line or message over the limits sends
/// `% 500` with the detail, then closes. When `shutdown` fires, the request in progress
/// (if any) is finished and answered, then `% 520 server shutting down` is sent and the
/// connection closed.
///
/// # Errors
/// [`TransportError`] for I/O failures, timeouts, limit violations and failed negotiation;
/// a clean half-close or shutdown returns `Ok(())`.
pub async fn serve_connection<S, H>(
    stream: S,
    peer: PeerContext,
    handler: &H,
    config: &TransportConfig,
    shutdown: CancellationToken,
) -> Result<(), TransportError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
    H: RequestHandler,
{
    serve_tracked_connection(
        stream,
        peer,
        handler,
        config,
        shutdown,
        ConnHooks::default(),
    )
    .await
}

/// As [`serve_connection`], reporting each request to `hooks.activity` (the listener's
/// slot) and growing its read buffer into `hooks.budget`.
///
/// # Errors
/// As [`serve_connection`].
pub async fn serve_tracked_connection<S, H>(
    stream: S,
    peer: PeerContext,
    handler: &H,
    config: &TransportConfig,
    shutdown: CancellationToken,
    hooks: ConnHooks<'_>,
) -> Result<(), TransportError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
    H: RequestHandler,
{
    serve_inner(
        stream,
        peer,
        handler,
        None::<&CipOnly>,
        config,
        shutdown,
        hooks,
    )
    .await
}

/// A second protocol on a CIP port, the way ROADS' `wppd` answers Whois++ queries and CIPv3
/// polls on one port: it serves a connection whose first line is not a version line.
pub trait OtherProtocol: Send + Sync {
    /// Serves the rest of the connection, after the banner: `first` is the line the client
    /// sent (without its line end), `buffered` what it sent after that line.
    fn serve<S>(
        &self,
        first: String,
        io: S,
        buffered: BytesMut,
        peer: &PeerContext,
        shutdown: CancellationToken,
    ) -> impl std::future::Future<Output = Result<(), TransportError>> + Send
    where
        S: AsyncRead + AsyncWrite + Unpin + Send;
}

/// No second protocol.
struct CipOnly;

impl OtherProtocol for CipOnly {
    async fn serve<S>(
        &self,
        _: String,
        _: S,
        _: BytesMut,
        _: &PeerContext,
        _: CancellationToken,
    ) -> Result<(), TransportError>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send,
    {
        Ok(())
    }
}

/// As [`serve_tracked_connection`], except that a connection whose first line is not a CIP
/// version line (a Whois++ query) is handed to `other` with that line, instead of refused.
///
/// # Errors
/// As [`serve_connection`], and what `other` returns.
pub async fn serve_shared_connection<S, H, O>(
    stream: S,
    peer: PeerContext,
    handler: &H,
    other: &O,
    config: &TransportConfig,
    shutdown: CancellationToken,
    hooks: ConnHooks<'_>,
) -> Result<(), TransportError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
    H: RequestHandler,
    O: OtherProtocol,
{
    serve_inner(stream, peer, handler, Some(other), config, shutdown, hooks).await
}

async fn serve_inner<S, H, O>(
    stream: S,
    peer: PeerContext,
    handler: &H,
    other: Option<&O>,
    config: &TransportConfig,
    shutdown: CancellationToken,
    hooks: ConnHooks<'_>,
) -> Result<(), TransportError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
    H: RequestHandler,
    O: OtherProtocol,
{
    let activity = hooks.activity;
    let mut conn = Conn::new(stream, config.limits, Expect::Version);
    conn.reservation = hooks.budget.map(|b| b.reservation());
    conn.queue_status(&Status::with_comment(
        ResponseCode::Banner,
        config.banner.clone(),
    ));
    conn.send(Instant::now() + config.banner_timeout, Phase::Banner)
        .await?;

    let first = Wait::new(config.negotiation_timeout, Phase::Negotiation, None);
    match conn
        .read_frame(Expect::Version, first, Some(&shutdown))
        .await
    {
        Ok(Read::Frame(Frame::Version {
            version: Some(CIP_VERSION),
            ..
        })) => {
            conn.queue_status(&Status::new(ResponseCode::VersionAccepted));
            conn.send(
                Instant::now() + config.negotiation_timeout,
                Phase::Negotiation,
            )
            .await?;
        }
        Ok(Read::Frame(Frame::Version {
            version: None,
            line,
        })) if other.is_some() => {
            // A Whois++ query: one request, answered to the end of the connection.
            if activity.is_some_and(|a| !a.begin()) {
                return Ok(());
            }
            let Conn { io, rbuf, .. } = conn;
            return match other {
                // Boxed, as a CIP request's handling is: rare, and large.
                Some(o) => Box::pin(o.serve(line, io, rbuf, &peer, shutdown)).await,
                None => Ok(()),
            };
        }
        Ok(Read::Frame(Frame::Version { version, line })) => {
            let comment = match version {
                Some(v) => format!("CIP version {v} not supported; this server speaks version 3"),
                None => "expected # CIP-Version: 3".to_owned(),
            };
            conn.abort(ResponseCode::BadMimeFormat, comment, config)
                .await;
            return Err(TransportError::NotNegotiated { line });
        }
        Ok(Read::Frame(_)) => unreachable_frame(),
        Ok(Read::Eof) => return conn.finish_closing(config).await,
        Ok(Read::Cancelled) => return conn.finish_shutdown(config).await,
        Err(e) => return conn.fail(e, config).await,
    }

    loop {
        if shutdown.is_cancelled() {
            return conn.finish_shutdown(config).await;
        }
        let wait = Wait::new(
            config.idle_timeout,
            Phase::Idle,
            Some(config.transfer_timeout),
        );
        let message = match conn
            .read_frame(Expect::Message, wait, Some(&shutdown))
            .await
        {
            Ok(Read::Frame(Frame::Message(m))) => m,
            Ok(Read::Frame(_)) => unreachable_frame(),
            Ok(Read::Eof) => return conn.finish_closing(config).await,
            Ok(Read::Cancelled) => return conn.finish_shutdown(config).await,
            Err(e) => return conn.fail(e, config).await,
        };
        if activity.is_some_and(|a| !a.begin()) {
            return Ok(());
        }
        match Request::from_mime(&message, &config.limits) {
            Err(e) => {
                debug!(remote = %peer.remote, error = %e, "refusing request");
                conn.queue_status(&Status::with_comment(e.code(), e.to_string()));
            }
            Ok(request) => {
                debug!(remote = %peer.remote, kind = request.kind(), "request");
                // Boxed: the handler's future is large (a poll's answer, an import) and a
                // connection spends its life waiting for its next request.
                let reply = Box::pin(handler.handle(request, &peer)).await;
                conn.queue_reply(reply);
            }
        }
        conn.send(Instant::now() + config.transfer_timeout, Phase::Transfer)
            .await?;
        if let Some(a) = activity {
            a.end();
        }
        conn.shed_buffer();
    }
}

fn unreachable_frame() -> ! {
    // Invariant: CipCodec yields only Version frames in Expect::Version, Message frames in
    // Expect::Message and Expect::Result, and Status frames in Expect::Status; read_frame
    // sets the expectation.
    unreachable!("codec returned a frame of another kind than expected")
}

/// Opens connections to receiver-CIPs.
#[derive(Debug, Clone, Copy)]
pub struct CipClient;

impl CipClient {
    /// Connects to `addr` (a `SocketAddr` or `(host, port)`), runs the TLS handshake when
    /// `tls` is given, reads the banner and negotiates CIP version 3.
    ///
    /// TCP connect and TLS handshake share [`TransportConfig::connect_timeout`].
    ///
    /// # Errors
    /// [`TransportError`]: connect or handshake failure or timeout, a peer that refuses
    /// version 3 ([`TransportError::VersionRefused`]), or a broken banner.
    pub async fn connect<A: ToSocketAddrs>(
        addr: A,
        tls: Option<(Arc<rustls::ClientConfig>, ServerName<'static>)>,
        config: &TransportConfig,
    ) -> Result<CipConnection, TransportError> {
        let deadline = Instant::now() + config.connect_timeout;
        let tcp = timeout_at(deadline, TcpStream::connect(addr))
            .await
            .map_err(|_| TransportError::Timeout {
                phase: Phase::Connect,
            })??;
        tcp.set_nodelay(true)?;
        if let Some(idle) = config.keepalive {
            keepalive(&tcp, idle)?;
        }
        Self::start(tcp, tls, deadline, config).await
    }

    /// As [`CipClient::connect`], over `network` instead of the host's TCP (a simulator's;
    /// see [`crate::sys::net`]).
    ///
    /// # Errors
    /// As [`CipClient::connect`].
    pub async fn connect_over(
        network: &dyn Network,
        host: &str,
        port: u16,
        tls: Option<(Arc<rustls::ClientConfig>, ServerName<'static>)>,
        config: &TransportConfig,
    ) -> Result<CipConnection, TransportError> {
        let deadline = Instant::now() + config.connect_timeout;
        let stream = timeout_at(deadline, network.connect(host, port))
            .await
            .map_err(|_| TransportError::Timeout {
                phase: Phase::Connect,
            })??;
        Self::start(stream, tls, deadline, config).await
    }

    /// The TLS handshake (when `tls` is given, by `deadline`) and the version negotiation
    /// over a connected stream.
    async fn start<S: NetConn>(
        stream: S,
        tls: Option<(Arc<rustls::ClientConfig>, ServerName<'static>)>,
        deadline: Instant,
        config: &TransportConfig,
    ) -> Result<CipConnection, TransportError> {
        match tls {
            None => CipConnection::negotiate(stream, config).await,
            Some((tls_config, name)) => {
                let connector = tokio_rustls::TlsConnector::from(tls_config);
                let stream = timeout_at(deadline, connector.connect(name, stream))
                    .await
                    .map_err(|_| TransportError::Timeout {
                        phase: Phase::Handshake,
                    })??;
                CipConnection::negotiate(stream, config).await
            }
        }
    }
}

/// Any stream a connection can run over.
trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

/// A negotiated sender-CIP connection.
pub struct CipConnection {
    conn: Conn<Box<dyn Stream>>,
    config: TransportConfig,
    banner: Status,
}

impl std::fmt::Debug for CipConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CipConnection")
            .field("banner", &self.banner)
            .finish_non_exhaustive()
    }
}

/// The receiver's answer to a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientReply {
    /// The status code.
    pub code: ResponseCode,
    /// The status line's comment.
    pub comment: String,
    /// The output that followed a `201`, parsed as a poll result.
    pub result: Option<PollResult>,
    /// A message that came at once after a `200` (ROADS explains one this way: "We have
    /// DSI: ..."), as received.
    pub explanation: Option<bytes::Bytes>,
}

/// How long a `200` may be followed by the first byte of an explanation.
const EXPLANATION_FIRST_BYTE: Duration = Duration::from_millis(250);

/// How long a reply's explanation may take to arrive once its first byte is in.
const EXPLANATION_WAIT: Duration = Duration::from_secs(1);

impl CipConnection {
    /// Runs the sender side over an established stream: reads the `220` banner (with
    /// Whois++ continuation lines), sends `# CIP-Version: 3`, expects `300`.
    ///
    /// # Errors
    /// As [`CipClient::connect`].
    pub async fn negotiate<S>(stream: S, config: &TransportConfig) -> Result<Self, TransportError>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let mut conn: Conn<Box<dyn Stream>> =
            Conn::new(Box::new(stream), config.limits, Expect::Status);
        // This side waits on the peer: a peer (or a middlebox) that stops moving bytes fails
        // the exchange within the stall timeout, not the whole exchange's.
        conn.stall = config.stall_timeout;
        let banner = conn
            .read_status(Wait::new(config.banner_timeout, Phase::Banner, None))
            .await?;
        if banner.code != ResponseCode::Banner {
            return Err(TransportError::UnexpectedStatus {
                phase: Phase::Banner,
                status: banner,
            });
        }
        conn.queue(&Frame::version3())?;
        conn.send(
            Instant::now() + config.negotiation_timeout,
            Phase::Negotiation,
        )
        .await?;
        let wait = Wait::new(config.negotiation_timeout, Phase::Negotiation, None);
        let status = match conn.read_status(wait).await {
            Ok(s) => s,
            Err(TransportError::Stream(
                StreamError::BadStatusLine { line } | StreamError::UnknownCode { line, .. },
            )) => {
                return Err(TransportError::NotCipV3 {
                    answer: line.chars().take(80).collect(),
                });
            }
            Err(e) => return Err(e),
        };
        match status.code {
            ResponseCode::VersionAccepted => {}
            code if code.is_permanent_failure() => {
                return Err(TransportError::VersionRefused { status });
            }
            _ => {
                return Err(TransportError::UnexpectedStatus {
                    phase: Phase::Negotiation,
                    status,
                });
            }
        }
        Ok(Self {
            conn,
            config: config.clone(),
            banner,
        })
    }

    /// The receiver's banner.
    pub fn banner(&self) -> &Status {
        &self.banner
    }

    /// Sends one request and reads the status line and, after `201`, the result; the whole
    /// exchange is bounded by [`TransportConfig::transfer_timeout`].
    ///
    /// Output after any other code is not expected (digest A3); should stray bytes be
    /// waiting before the next request, they are read as a message and dropped with a debug
    /// log. Output after `201` to anything but a poll (digest A9) is parsed if possible and
    /// otherwise dropped.
    ///
    /// # Errors
    /// [`TransportError`]: I/O, timeout, a closed connection, a request that cannot be
    /// encoded within the limits, or a poll result that does not parse.
    pub async fn request(&mut self, request: &Request) -> Result<ClientReply, TransportError> {
        self.request_watched(request, None).await
    }

    /// [`Self::request`], showing `watch` the result's bytes so far (from its first byte)
    /// each time more arrive: its error refuses the result before the rest is read
    /// ([`TransportError::Refused`]; drop the connection then). A poller refuses a hint
    /// over its memory budget so.
    ///
    /// # Errors
    /// As [`Self::request`], and [`TransportError::Refused`].
    pub async fn request_watched(
        &mut self,
        request: &Request,
        watch: Option<&mut Watch>,
    ) -> Result<ClientReply, TransportError> {
        let deadline = Instant::now() + self.config.transfer_timeout;
        let wait = Wait::until(deadline, Phase::Transfer);
        if !self.conn.rbuf.is_empty() {
            match self.conn.read_frame(Expect::Message, wait, None).await? {
                Read::Frame(Frame::Message(m)) => {
                    debug!(bytes = m.len(), "dropping unexpected output after a reply");
                }
                _ => {
                    return Err(TransportError::Closed {
                        phase: Phase::Transfer,
                    });
                }
            }
        }
        let message = request.to_mime()?;
        self.conn.queue(&Frame::Message(message))?;
        self.conn.send(deadline, Phase::Transfer).await?;
        let status = self.conn.read_status(wait).await?;
        let mut reply = ClientReply {
            code: status.code,
            comment: status.comment,
            result: None,
            explanation: None,
        };
        if status.code == ResponseCode::Ok && matches!(request, Request::Poll { .. }) {
            // A message the server sends with its 200 to a poll (ROADS names its own DSI
            // this way), already here or arriving at once; a server that sends none costs
            // this wait, on polls answered 200 only.
            let explain = Wait {
                first_byte: deadline.min(Instant::now() + EXPLANATION_FIRST_BYTE),
                phase: Phase::Transfer,
                rest: Some(EXPLANATION_WAIT),
            };
            if let Ok(Read::Frame(Frame::Message(m))) =
                self.conn.read_frame(Expect::Message, explain, None).await
            {
                reply.explanation = Some(m);
            }
        }
        if status.code == ResponseCode::OkOutputFollows {
            let output = match self
                .conn
                .read_frame_watched(Expect::Result, wait, None, watch)
                .await?
            {
                Read::Frame(Frame::Message(m)) => m,
                _ => {
                    return Err(TransportError::Closed {
                        phase: Phase::Transfer,
                    });
                }
            };
            match PollResult::from_mime(&output, &self.config.limits) {
                Ok(result) => reply.result = Some(result),
                Err(e) if matches!(request, Request::Poll { .. }) => return Err(e.into()),
                Err(e) => debug!(error = %e, kind = request.kind(), "dropping unparsable output"),
            }
        }
        // A kept-alive connection waits for its next poll holding no buffer.
        self.conn.shed_buffer();
        Ok(reply)
    }

    /// Half-closes the connection and waits for the receiver's `222`.
    ///
    /// # Errors
    /// I/O failure, timeout ([`TransportConfig::banner_timeout`]) or a status other than 222.
    /// A receiver that closes without sending 222 is accepted.
    pub async fn close(mut self) -> Result<(), TransportError> {
        let deadline = Instant::now() + self.config.banner_timeout;
        timeout_at(deadline, self.conn.io.shutdown())
            .await
            .map_err(|_| TransportError::Timeout {
                phase: Phase::Closing,
            })??;
        match self
            .conn
            .read_frame(Expect::Status, Wait::until(deadline, Phase::Closing), None)
            .await?
        {
            Read::Frame(Frame::Status(s)) if s.code == ResponseCode::Closing => Ok(()),
            Read::Frame(Frame::Status(status)) => Err(TransportError::UnexpectedStatus {
                phase: Phase::Closing,
                status,
            }),
            _ => {
                debug!("receiver closed without 222");
                Ok(())
            }
        }
    }
}

/// Turns TCP keepalive on for `tcp`: the first probe after `idle` without traffic, then
/// one every third of it; three unanswered end the connection, so a peer that vanished
/// without a reset is found about `2 × idle` later even on an idle connection.
///
/// # Errors
/// When the system refuses the options.
pub fn keepalive(tcp: &TcpStream, idle: Duration) -> std::io::Result<()> {
    let interval = (idle / 3).max(Duration::from_secs(1));
    let params = socket2::TcpKeepalive::new()
        .with_time(idle)
        .with_interval(interval)
        .with_retries(3);
    socket2::SockRef::from(tcp).set_tcp_keepalive(&params)
}

/// How long [`Conn::read_frame`] may wait.
#[derive(Debug, Clone, Copy)]
struct Wait {
    /// Deadline for the first byte of the frame.
    first_byte: Instant,
    /// Phase reported if it passes.
    phase: Phase,
    /// Once a byte arrived: time allowed for the rest (phase [`Phase::Transfer`]); `None`
    /// keeps `first_byte` as the deadline.
    rest: Option<Duration>,
}

impl Wait {
    fn new(first: Duration, phase: Phase, rest: Option<Duration>) -> Self {
        Self {
            first_byte: Instant::now() + first,
            phase,
            rest,
        }
    }

    fn until(deadline: Instant, phase: Phase) -> Self {
        Self {
            first_byte: deadline,
            phase,
            rest: None,
        }
    }
}

enum Read {
    Frame(Frame),
    Eof,
    Cancelled,
}

/// A stream with the codec, its read buffer and its write buffer.
struct Conn<S> {
    io: S,
    codec: CipCodec,
    rbuf: BytesMut,
    wbuf: BytesMut,
    /// What the read buffer holds of the shared in-flight budget (served connections).
    reservation: Option<crate::sys::budget::Reservation>,
    /// [`TransportConfig::stall_timeout`].
    stall: Option<Duration>,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Conn<S> {
    fn new(io: S, limits: Limits, expect: Expect) -> Self {
        Self {
            io,
            codec: CipCodec::new(limits, expect),
            rbuf: BytesMut::new(),
            wbuf: BytesMut::new(),
            reservation: None,
            stall: None,
        }
    }

    /// The deadline of one read or write in `phase` under `deadline`: sooner by the stall
    /// timeout while an exchange is under way (waiting for the next request is not one),
    /// and the error its passing gives.
    fn step_deadline(&self, deadline: Instant, phase: Phase) -> (Instant, TransportError) {
        match self.stall {
            Some(stall) if phase != Phase::Idle && Instant::now() + stall < deadline => (
                Instant::now() + stall,
                TransportError::Stalled {
                    phase,
                    after: stall,
                },
            ),
            _ => (deadline, TransportError::Timeout { phase }),
        }
    }

    /// After an exchange: emptied read and write buffers are dropped (they would otherwise
    /// stay allocated, at their largest, for the connection's life: across a mesh's kept-alive
    /// connections that was most of a node's memory) and the read buffer's share of the
    /// budget given back.
    fn shed_buffer(&mut self) {
        if self.rbuf.is_empty() && self.rbuf.capacity() > 0 {
            self.rbuf = BytesMut::new();
        }
        if self.wbuf.is_empty() && self.wbuf.capacity() > 0 {
            self.wbuf = BytesMut::new();
        }
        if self.rbuf.is_empty()
            && let Some(r) = &mut self.reservation
        {
            r.release();
        }
    }

    /// Reads one frame of kind `expect`. `cancel` is honoured only while no byte of the
    /// frame has arrived, so a request in progress is always read to its end.
    async fn read_frame(
        &mut self,
        expect: Expect,
        wait: Wait,
        cancel: Option<&CancellationToken>,
    ) -> Result<Read, TransportError> {
        self.read_frame_watched(expect, wait, cancel, None).await
    }

    /// [`Self::read_frame`], showing `watch` the frame's bytes so far (from its first byte:
    /// the codec takes nothing of a frame before it is whole) after each read; its error
    /// ends the read ([`TransportError::Refused`]; the connection is then mid-frame: drop
    /// it).
    async fn read_frame_watched(
        &mut self,
        expect: Expect,
        wait: Wait,
        cancel: Option<&CancellationToken>,
        mut watch: Option<&mut Watch>,
    ) -> Result<Read, TransportError> {
        self.codec.expect(expect);
        // What came with earlier reads (the status line's) first.
        if let Some(w) = watch.as_deref_mut()
            && !self.rbuf.is_empty()
        {
            w(&self.rbuf).map_err(TransportError::Refused)?;
        }
        let mut started = (!self.rbuf.is_empty()).then(Instant::now);
        loop {
            if let Some(frame) = self.codec.decode(&mut self.rbuf)? {
                return Ok(Read::Frame(frame));
            }
            let (deadline, phase) = match (started, wait.rest) {
                (Some(at), Some(rest)) => (at + rest, Phase::Transfer),
                _ => (wait.first_byte, wait.phase),
            };
            // Never read past what the codec may hold: a frame that is not complete within
            // this many bytes is refused by it, so an oversize line or message is cut off at
            // the limit instead of after a read of twice the limit.
            let room = self.max_buffered().saturating_sub(self.rbuf.len()).max(1);
            let len = self.rbuf.len();
            if self.rbuf.capacity() - len < (len.max(FIRST_READ) / 4).min(READ_CHUNK / 4) {
                // Grow geometrically (doubling from a small first read) so a large message
                // is not copied once per chunk and a small one does not hold a large buffer;
                // the codec's limits bound the size, the shared budget the sum over
                // connections.
                let more = len.max(FIRST_READ).min(room);
                if let Some(r) = &mut self.reservation {
                    r.cover(self.rbuf.len() + more, deadline).await?;
                }
                // Past 8 MiB in a fresh allocation, returned to the system once freed.
                crate::sys::alloc::reserve(&mut self.rbuf, more);
            }
            let (step, passed) = self.step_deadline(deadline, phase);
            let before = self.rbuf.len();
            let mut rbuf = (&mut self.rbuf).limit(room);
            let read = timeout_at(step, self.io.read_buf(&mut rbuf));
            let read = match cancel.filter(|_| started.is_none()) {
                Some(token) => tokio::select! {
                    biased;
                    () = token.cancelled() => return Ok(Read::Cancelled),
                    r = read => r,
                },
                None => read.await,
            };
            let Ok(n) = read else { return Err(passed) };
            let n = n?;
            if let Some(w) = watch.as_deref_mut()
                && self.rbuf.len() > before
            {
                w(&self.rbuf).map_err(TransportError::Refused)?;
            }
            if n == 0 {
                return Ok(match self.codec.decode_eof(&mut self.rbuf)? {
                    Some(frame) => Read::Frame(frame),
                    None => Read::Eof,
                });
            }
            started.get_or_insert_with(Instant::now);
        }
    }

    /// Most bytes the read buffer may hold before the codec must have refused the frame:
    /// one byte past its largest incomplete frame.
    fn max_buffered(&self) -> usize {
        let limits = self.codec.limits();
        limits
            .max_message
            .max(limits.max_header)
            .saturating_add(limits.max_line)
            .saturating_add(3)
    }

    async fn read_status(&mut self, wait: Wait) -> Result<Status, TransportError> {
        match self.read_frame(Expect::Status, wait, None).await? {
            Read::Frame(Frame::Status(s)) => Ok(s),
            Read::Frame(_) => unreachable_frame(),
            Read::Eof | Read::Cancelled => Err(TransportError::Closed { phase: wait.phase }),
        }
    }

    fn queue(&mut self, frame: &Frame) -> Result<(), StreamError> {
        self.codec.encode(frame, &mut self.wbuf)
    }

    fn queue_status(&mut self, status: &Status) {
        encode_status(status, &mut self.wbuf);
    }

    /// Queues a handler's reply: the status, and after 201 the result. A result that cannot
    /// be encoded within the limits is replaced by `400` with the reason.
    fn queue_reply(&mut self, reply: Reply) {
        let comment = reply.comment.unwrap_or_default();
        let status = Status::with_comment(reply.code, comment);
        if reply.code != ResponseCode::OkOutputFollows {
            if reply.result.is_some() {
                warn!(code = %reply.code, "handler returned a result without 201; not sent");
            }
            self.queue_status(&status);
            return;
        }
        let result = reply.result.unwrap_or_default();
        let before = self.wbuf.len();
        self.queue_status(&status);
        let encoded = result
            .to_mime()
            .map_err(|e| e.to_string())
            .and_then(|m| self.queue(&Frame::Message(m)).map_err(|e| e.to_string()));
        if let Err(reason) = encoded {
            warn!(%reason, "cannot send poll result");
            self.wbuf.truncate(before);
            self.queue_status(&Status::with_comment(
                ResponseCode::TemporarilyUnable,
                format!("cannot send result: {reason}"),
            ));
        }
    }

    /// Writes the write buffer by `deadline`; with a stall timeout, each write must make
    /// progress within it.
    async fn send(&mut self, deadline: Instant, phase: Phase) -> Result<(), TransportError> {
        let mut at = 0;
        while at < self.wbuf.len() {
            let (step, passed) = self.step_deadline(deadline, phase);
            let Ok(n) = timeout_at(step, self.io.write(&self.wbuf[at..])).await else {
                return Err(passed);
            };
            match n? {
                0 => return Err(std::io::Error::from(std::io::ErrorKind::WriteZero).into()),
                n => at += n,
            }
        }
        let (step, passed) = self.step_deadline(deadline, phase);
        timeout_at(step, self.io.flush())
            .await
            .map_err(|_| passed)??;
        self.wbuf.clear();
        Ok(())
    }

    /// Best effort: sends `code comment`, then closes. Errors are ignored, the connection is
    /// being dropped anyway.
    async fn abort(&mut self, code: ResponseCode, comment: String, config: &TransportConfig) {
        self.wbuf.clear();
        self.queue_status(&Status::with_comment(code, comment));
        let deadline = Instant::now() + config.banner_timeout;
        if self.send(deadline, Phase::Closing).await.is_ok() {
            let _ = timeout_at(deadline, self.io.shutdown()).await;
        }
    }

    /// The sender half-closed: `222`, close (RFC 2653 §2.1).
    async fn finish_closing(mut self, config: &TransportConfig) -> Result<(), TransportError> {
        if !self.rbuf.is_empty() {
            debug!(
                bytes = self.rbuf.len(),
                "discarding partial message at half-close"
            );
        }
        self.abort(
            ResponseCode::Closing,
            ResponseCode::Closing.text().to_owned(),
            config,
        )
        .await;
        Ok(())
    }

    async fn finish_shutdown(mut self, config: &TransportConfig) -> Result<(), TransportError> {
        self.abort(
            ResponseCode::Aborting,
            "server shutting down".to_owned(),
            config,
        )
        .await;
        Ok(())
    }

    /// Answers a read failure as the receiver: `520` for a timeout, `500` for a broken limit,
    /// `222` for a half-close inside a message; nothing for I/O errors.
    async fn fail(
        mut self,
        error: TransportError,
        config: &TransportConfig,
    ) -> Result<(), TransportError> {
        match &error {
            TransportError::Stream(StreamError::Truncated { .. }) => {
                return self.finish_closing(config).await;
            }
            TransportError::Budget(e) => {
                self.abort(
                    ResponseCode::TemporarilyUnable,
                    format!("{}: {e}", ResponseCode::TemporarilyUnable.text()),
                    config,
                )
                .await;
            }
            TransportError::Timeout { phase } => {
                self.abort(
                    ResponseCode::Aborting,
                    format!("timeout during {phase}"),
                    config,
                )
                .await;
            }
            TransportError::Stream(StreamError::Io(_)) | TransportError::Io(_) => {}
            TransportError::Stream(e) => {
                self.abort(ResponseCode::BadMimeFormat, e.to_string(), config)
                    .await;
            }
            _ => {}
        }
        Err(error)
    }
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use tokio::io::ReadBuf;

    use super::*;

    /// An endless sender of short lines that counts the bytes it handed out.
    struct Endless {
        given: usize,
    }

    impl AsyncRead for Endless {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<std::io::Result<()>> {
            let n = buf.remaining();
            for i in 0..n {
                buf.put_slice(if (self.given + i) % 10 == 9 {
                    b"\n"
                } else {
                    b"x"
                });
            }
            self.given += n;
            Poll::Ready(Ok(()))
        }
    }

    impl AsyncWrite for Endless {
        fn poll_write(
            self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            Poll::Ready(Ok(buf.len()))
        }

        fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn an_endless_message_is_refused_at_the_limit_not_after_it() {
        let limits = Limits {
            max_line: 100,
            max_message: 10_000,
            max_header: 1000,
            ..Limits::default()
        };
        let mut conn = Conn::new(Endless { given: 0 }, limits, Expect::Message);
        let wait = Wait::new(Duration::from_secs(5), Phase::Idle, None);
        let e = conn
            .read_frame(Expect::Message, wait, None)
            .await
            .err()
            .expect("refused");
        assert!(
            matches!(
                e,
                TransportError::Stream(StreamError::MessageTooLarge { .. })
            ),
            "{e}"
        );
        // Never more read than the codec may hold (plus one byte), although every read
        // could have filled the whole buffer.
        assert!(conn.io.given <= conn.max_buffered(), "{}", conn.io.given);
        assert!(conn.rbuf.capacity() < 4 * conn.max_buffered());
    }

    #[tokio::test]
    async fn a_short_frame_takes_a_small_buffer_and_an_exchange_leaves_none() {
        let (mut far, near) = tokio::io::duplex(1 << 20);
        let mut conn = Conn::new(near, Limits::default(), Expect::Message);
        let wait = Wait::new(Duration::from_secs(5), Phase::Idle, None);
        // A short status line: a first read of a few KiB, not of a chunk.
        far.write_all(b"200 ok\r\n").await.unwrap();
        match conn.read_frame(Expect::Status, wait, None).await.unwrap() {
            Read::Frame(Frame::Status(s)) => assert_eq!(s.code, ResponseCode::Ok),
            _ => panic!("a status"),
        }
        assert!(
            conn.rbuf.capacity() <= FIRST_READ,
            "{}",
            conn.rbuf.capacity()
        );
        // The exchange's end gives both buffers back.
        conn.queue_status(&Status::new(ResponseCode::Ok));
        conn.send(Instant::now() + Duration::from_secs(5), Phase::Transfer)
            .await
            .unwrap();
        conn.shed_buffer();
        assert_eq!(conn.rbuf.capacity(), 0);
        assert_eq!(conn.wbuf.capacity(), 0);
    }
}
