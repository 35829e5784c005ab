//! Tests of the stream transport: transcripts, every response code, timeouts, shutdown,
//! push and TLS.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use cip_proto::Dsi;
use cip_proto::cip::{IndexObject, IndexType, PollResult, Request, ResponseCode, StreamError};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, DuplexStream, duplex};
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::sys::tls;

const DSI: &str = "1.3.6.1.4.1.99999.7";
const TAGGED_PAYLOAD: &str = "version: x-tagged-index-1\r\nupdatetype: total\r\nthisupdate: 946684800\r\nBEGIN IO-Schema\r\ncn: TOKEN\r\nsn: FULL\r\nEND IO-Schema\r\nBEGIN Index-Info\r\ncn: 1/Barbara\r\n-2/Bjorn\r\n-*/Jensen\r\nsn: */Jensen\r\nEND Index-Info\r\n";

fn tagged_object() -> IndexObject {
    IndexObject {
        index_type: IndexType::tagged(),
        dsi: Dsi::new(DSI).unwrap(),
        base_uris: vec![
            "ldap://ldap.example.net/dc=example,dc=net".into(),
            "whoispp://whois.example.net:63/".into(),
        ],
        dsi_description: None,
        payload: Bytes::from_static(TAGGED_PAYLOAD.as_bytes()),
    }
}

/// Answers like the digest's example receiver, records what it saw, and turns
/// `application/index.vnd.code-NNN` into status NNN.
#[derive(Default)]
struct TestHandler {
    seen: Mutex<Vec<(Request, Option<usize>)>>,
    gate: Option<Arc<Notify>>,
}

impl RequestHandler for TestHandler {
    async fn handle(&self, request: Request, peer: &PeerContext) -> Reply {
        if let Some(gate) = &self.gate {
            gate.notified().await;
        }
        let certs = peer.tls_peer_certificates.as_ref().map(Vec::len);
        self.seen.lock().unwrap().push((request.clone(), certs));
        match request {
            Request::Noop | Request::DataChanged { .. } | Request::IndexObject(_) => Reply::ok(),
            Request::Poll { index_type, .. } if index_type == IndexType::tagged() => {
                Reply::result(PollResult {
                    objects: vec![tagged_object()],
                })
            }
            Request::Poll { .. } => {
                Reply::status(ResponseCode::Ok, "No index of that type for this dataset")
            }
            Request::Vendor { subtype, .. } => {
                let code = subtype
                    .strip_prefix("code-")
                    .and_then(|c| c.parse::<u16>().ok());
                match code.map(ResponseCode::try_from) {
                    Some(Ok(ResponseCode::OkOutputFollows)) => Reply::result(PollResult::default()),
                    Some(Ok(code)) => Reply::status(code, format!("as asked: {code}")),
                    _ => Reply::status(ResponseCode::UnknownRequest, "unknown vendor request"),
                }
            }
        }
    }
}

fn peer() -> PeerContext {
    PeerContext {
        remote: SocketAddr::from(([127, 0, 0, 1], 4000)),
        tls_peer_certificates: None,
    }
}

fn config() -> TransportConfig {
    TransportConfig {
        banner: "cip.example.net CIP server ready".into(),
        ..TransportConfig::default()
    }
}

/// Spawns a server on one end of an in-memory pipe; returns the other end and the task.
fn spawn_server(
    handler: Arc<TestHandler>,
    config: TransportConfig,
    token: CancellationToken,
) -> (
    DuplexStream,
    tokio::task::JoinHandle<Result<(), TransportError>>,
) {
    let (client, server) = duplex(1 << 20);
    let task = tokio::spawn(async move {
        serve_connection(server, peer(), handler.as_ref(), &config, token).await
    });
    (client, task)
}

async fn read_to_end(mut s: impl AsyncRead + Unpin) -> String {
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    String::from_utf8(out).unwrap()
}

/// The digest's example session (§1.11) sent by a sender that pipelines everything and then
/// half-closes; our side of the transcript must match byte for byte.
#[tokio::test]
async fn digest_example_session_server_transcript() {
    let handler = Arc::new(TestHandler::default());
    let (client, task) = spawn_server(handler.clone(), config(), CancellationToken::new());
    let (read, mut write) = tokio::io::split(client);
    let input = concat!(
        "# CIP-Version: 3\r\n",
        "Mime-Version: 1.0\r\n",
        "Content-Type: application/index.cmd.noop\r\n",
        "\r\n",
        ".\r\n",
        "Mime-Version: 1.0\r\n",
        "Content-Type: application/index.cmd.poll; type=\"tagged\"; dsi=\"1.3.6.1.4.1.99999.7\"\r\n",
        "\r\n",
        ".\r\n",
        "Content-Type: application/index.cmd.poll; type=\"harvest-soif-1\"; dsi=\"1.3.6.1.4.1.99999.7\"\r\n",
        "\r\n",
        ".\r\n",
        "Content-Type: application/index.cmd.poll; type=\"tagged\"\r\n",
        "\r\n",
        ".\r\n",
        "Content-Type: application/index.cmd.reindex\r\n",
        "\r\n",
        ".\r\n",
    );
    write.write_all(input.as_bytes()).await.unwrap();
    write.shutdown().await.unwrap();
    let output = read_to_end(read).await;
    let expected = [
        "% 220 cip.example.net CIP server ready\r\n",
        "% 300 Requested CIP version accepted\r\n",
        "% 200 MIME request received and processed\r\n",
        "% 201 MIME request received and processed, output follows\r\n",
        "Mime-Version: 1.0\r\n",
        "Content-Type: multipart/mixed; boundary=cipv3-part\r\n",
        "\r\n",
        "--cipv3-part\r\n",
        "Content-Type: application/index.obj.tagged; type=\"tagged\";\r\n",
        " dsi=\"1.3.6.1.4.1.99999.7\";\r\n",
        " base-uri=\"ldap://ldap.example.net/dc=example,dc=net whoispp://whois.example.net:63/\"\r\n",
        "\r\n",
        TAGGED_PAYLOAD,
        "\r\n",
        "--cipv3-part--\r\n",
        ".\r\n",
        "% 200 No index of that type for this dataset\r\n",
        "% 502 required parameter dsi is missing\r\n",
        "% 501 unknown command application/index.cmd.reindex\r\n",
        "% 222 Connection closing (in response to sender-CIP close)\r\n",
    ]
    .concat();
    assert_eq!(output, expected);
    task.await.unwrap().unwrap();
    assert_eq!(handler.seen.lock().unwrap().len(), 3);
}

/// A fake receiver in the loosest forms we accept: Whois++ continuation banner, status lines
/// without `%`, bare LF, and a ROADS-style result with an index.response part. Our side of
/// the transcript must be exact.
#[tokio::test]
async fn tolerant_client_against_legacy_formatting() {
    let (client, mut server) = duplex(1 << 16);
    let fake = tokio::spawn(async move {
        server
            .write_all(b"% 220-Example CIP server\n% 220-second line\n220 ready\n")
            .await
            .unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while !got.ends_with(b"\r\n") {
            let n = server.read(&mut buf).await.unwrap();
            got.extend_from_slice(&buf[..n]);
        }
        server
            .write_all(b"300 Requested CIP version accepted\n")
            .await
            .unwrap();
        while !got.ends_with(b"\r\n.\r\n") {
            let n = server.read(&mut buf).await.unwrap();
            got.extend_from_slice(&buf[..n]);
        }
        server
            .write_all(concat!(
                "%201 output follows\n",
                "Mime-Version: 1.0\n",
                "Content-type: multipart/mixed; boundary=xyz\n",
                "\n",
                "--xyz\n",
                "Content-type: application/index.response; code=201\n",
                "\n",
                "\n",
                "--xyz\n",
                "Content-type: application/index.obj.tagged; type=x-tagged-index-1; dsi=1.3.6.1.4.1.99999.7;\n",
                "\tbase-uri = \"ldap://ldap.example.net/\"\n",
                "\n",
                "version: x-tagged-index-1\n",
                "..\n",
                "--xyz--\n",
                ".\n",
            ).as_bytes())
            .await
            .unwrap();
        let n = server.read(&mut buf).await.unwrap();
        assert_eq!(n, 0, "sender half-closes");
        server.write_all(b"222 bye\n").await.unwrap();
        String::from_utf8(got).unwrap()
    });
    let mut conn = CipConnection::negotiate(client, &config()).await.unwrap();
    assert_eq!(
        conn.banner().continuation,
        ["Example CIP server", "second line"]
    );
    let poll = Request::Poll {
        index_type: IndexType::tagged(),
        dsi: Dsi::new(DSI).unwrap(),
        params: vec![],
        body: Bytes::new(),
    };
    let reply = conn.request(&poll).await.unwrap();
    assert_eq!(
        (reply.code, reply.comment.as_str()),
        (ResponseCode::OkOutputFollows, "output follows")
    );
    let objects = reply.result.unwrap().objects;
    assert_eq!(objects.len(), 1);
    assert_eq!(objects[0].index_type, IndexType::tagged());
    assert_eq!(&objects[0].payload[..], b"version: x-tagged-index-1\n.");
    conn.close().await.unwrap();
    let sent = fake.await.unwrap();
    assert_eq!(
        sent,
        concat!(
            "# CIP-Version: 3\r\n",
            "Mime-Version: 1.0\r\n",
            "Content-Type: application/index.cmd.poll; type=\"tagged\";\r\n",
            " dsi=\"1.3.6.1.4.1.99999.7\"\r\n",
            "\r\n",
            ".\r\n",
        )
    );
}

/// Every code a receiver can send reaches the sender intact; 201 brings its output.
#[tokio::test]
async fn every_response_code_round_trips() {
    let handler = Arc::new(TestHandler::default());
    let (client, task) = spawn_server(handler, config(), CancellationToken::new());
    let mut conn = CipConnection::negotiate(client, &config()).await.unwrap();
    assert_eq!(conn.banner().code, ResponseCode::Banner);
    for code in ResponseCode::ALL {
        let request = Request::Vendor {
            subtype: format!("code-{}", code.code()),
            params: vec![],
            body: Bytes::new(),
        };
        let reply = conn.request(&request).await.unwrap();
        assert_eq!(reply.code, code);
        assert_eq!(
            reply.result.is_some(),
            code == ResponseCode::OkOutputFollows
        );
    }
    // The codes the transport itself produces for bad requests.
    for (raw, code) in [
        (
            "Content-Type: application/index.cmd.poll; type=tagged\r\n\r\n",
            ResponseCode::MissingAttributes,
        ),
        (
            "Content-Type: application/index.cmd.stats\r\n\r\n",
            ResponseCode::UnknownRequest,
        ),
        ("Mime-Version: 1.0\r\n\r\n", ResponseCode::UnknownRequest),
        ("no header line\r\n\r\n", ResponseCode::BadMimeFormat),
    ] {
        assert_eq!(raw_request_code(raw).await, code, "{raw}");
    }
    conn.close().await.unwrap();
    task.await.unwrap().unwrap();
}

/// Sends a hand-written (possibly broken) request on a fresh connection; returns the code of
/// the status line that answers it.
async fn raw_request_code(raw: &str) -> ResponseCode {
    let handler = Arc::new(TestHandler::default());
    let (mut client, task) = spawn_server(handler, config(), CancellationToken::new());
    client
        .write_all(format!("# CIP-Version: 3\r\n{raw}.\r\n").as_bytes())
        .await
        .unwrap();
    client.shutdown().await.unwrap();
    let out = read_to_end(client).await;
    task.await.unwrap().unwrap();
    let third = out.lines().nth(2).unwrap();
    let code: u16 = third[2..5].parse().unwrap();
    ResponseCode::try_from(code).unwrap()
}

#[tokio::test]
async fn negotiation_failures() {
    for (first, expect) in [
        (
            "# CIP-Version: 4\r\n",
            "% 500 CIP version 4 not supported; this server speaks version 3\r\n",
        ),
        (
            "Content-Type: application/index.cmd.noop\r\n",
            "% 500 expected # CIP-Version: 3\r\n",
        ),
    ] {
        let (mut client, task) = spawn_server(Arc::default(), config(), CancellationToken::new());
        client.write_all(first.as_bytes()).await.unwrap();
        let out = read_to_end(client).await;
        assert_eq!(
            out,
            format!("% 220 cip.example.net CIP server ready\r\n{expect}")
        );
        assert!(matches!(
            task.await.unwrap(),
            Err(TransportError::NotNegotiated { .. })
        ));
    }
    // A legacy Whois++ server refuses version 3 with a 5xx.
    let (client, mut server) = duplex(4096);
    tokio::spawn(async move {
        server
            .write_all(b"% 220-Legacy Whois++ server\r\n% 220 Ready\r\n% 500 Syntax error\r\n")
            .await
            .unwrap();
        let mut sink = Vec::new();
        let _ = server.read_to_end(&mut sink).await;
    });
    let e = CipConnection::negotiate(client, &config())
        .await
        .unwrap_err();
    assert!(
        matches!(e, TransportError::VersionRefused { ref status } if status.code == ResponseCode::BadMimeFormat),
        "{e}"
    );
    // An undefined code is fatal.
    let (client, mut server) = duplex(4096);
    tokio::spawn(async move { server.write_all(b"% 226 what\r\n").await.unwrap() });
    let e = CipConnection::negotiate(client, &config())
        .await
        .unwrap_err();
    assert!(
        matches!(e, TransportError::Stream(StreamError::UnknownCode { .. })),
        "{e}"
    );
}

#[tokio::test]
async fn oversize_request_gets_500_and_close() {
    let mut cfg = config();
    cfg.limits.max_line = 100;
    let (mut client, task) = spawn_server(Arc::default(), cfg, CancellationToken::new());
    client.write_all(b"# CIP-Version: 3\r\n").await.unwrap();
    client.write_all(&[b'x'; 200]).await.unwrap();
    let out = read_to_end(client).await;
    assert!(
        out.ends_with("% 500 line at byte 0 of the frame exceeds 100 bytes\r\n"),
        "{out}"
    );
    assert!(matches!(
        task.await.unwrap(),
        Err(TransportError::Stream(StreamError::LineTooLong { .. }))
    ));
}

#[tokio::test]
async fn partial_message_at_half_close_gets_222() {
    let (mut client, task) = spawn_server(Arc::default(), config(), CancellationToken::new());
    client
        .write_all(b"# CIP-Version: 3\r\nContent-Type: application/index.cmd.noop\r\n")
        .await
        .unwrap();
    client.shutdown().await.unwrap();
    let out = read_to_end(client).await;
    assert!(out.ends_with("% 300 Requested CIP version accepted\r\n% 222 Connection closing (in response to sender-CIP close)\r\n"), "{out}");
    task.await.unwrap().unwrap();
}

#[tokio::test]
async fn push_datachanged_then_index_object() {
    let handler = Arc::new(TestHandler::default());
    let (client, task) = spawn_server(handler.clone(), config(), CancellationToken::new());
    let mut conn = CipConnection::negotiate(client, &config()).await.unwrap();
    let changed = Request::DataChanged {
        index_type: IndexType::tagged(),
        dsi: Dsi::new(DSI).unwrap(),
        body: Bytes::from_static(b"Time-of-latest-centroid-change: 855938804\r\n"),
    };
    let mut binary = tagged_object();
    binary.payload = Bytes::from_static(b"\x00\x01.\r\n.\r\n\xff");
    for request in [
        changed,
        Request::IndexObject(tagged_object()),
        Request::IndexObject(binary),
    ] {
        let reply = conn.request(&request).await.unwrap();
        assert_eq!(reply.code, ResponseCode::Ok);
        assert_eq!(handler.seen.lock().unwrap().last().unwrap().0, request);
    }
    conn.close().await.unwrap();
    task.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn receiver_timeouts_send_520() {
    let cfg = TransportConfig {
        negotiation_timeout: Duration::from_secs(5),
        idle_timeout: Duration::from_secs(30),
        transfer_timeout: Duration::from_secs(60),
        ..config()
    };
    // Negotiation.
    let (client, task) = spawn_server(Arc::default(), cfg.clone(), CancellationToken::new());
    let start = tokio::time::Instant::now();
    let out = read_to_end(client).await;
    assert!(
        out.ends_with("% 520 timeout during version negotiation\r\n"),
        "{out}"
    );
    assert!(matches!(
        task.await.unwrap(),
        Err(TransportError::Timeout {
            phase: Phase::Negotiation
        })
    ));
    assert_eq!(start.elapsed(), Duration::from_secs(5));
    // Idle.
    let (mut client, task) = spawn_server(Arc::default(), cfg.clone(), CancellationToken::new());
    client.write_all(b"# CIP-Version: 3\r\n").await.unwrap();
    let start = tokio::time::Instant::now();
    let out = read_to_end(client).await;
    assert!(
        out.ends_with("% 300 Requested CIP version accepted\r\n% 520 timeout during idle wait\r\n"),
        "{out}"
    );
    assert!(matches!(
        task.await.unwrap(),
        Err(TransportError::Timeout { phase: Phase::Idle })
    ));
    assert_eq!(start.elapsed(), Duration::from_secs(30));
    // Whole transfer: a request that starts and stalls.
    let (mut client, task) = spawn_server(Arc::default(), cfg, CancellationToken::new());
    client
        .write_all(b"# CIP-Version: 3\r\nContent-Type: app")
        .await
        .unwrap();
    let start = tokio::time::Instant::now();
    let out = read_to_end(client).await;
    assert!(out.ends_with("% 520 timeout during transfer\r\n"), "{out}");
    assert!(matches!(
        task.await.unwrap(),
        Err(TransportError::Timeout {
            phase: Phase::Transfer
        })
    ));
    assert_eq!(start.elapsed(), Duration::from_secs(60));
}

#[tokio::test(start_paused = true)]
async fn sender_timeouts() {
    let cfg = TransportConfig {
        banner_timeout: Duration::from_secs(7),
        ..config()
    };
    let (client, _server) = duplex(64);
    let e = CipConnection::negotiate(client, &cfg).await.unwrap_err();
    assert!(
        matches!(
            e,
            TransportError::Timeout {
                phase: Phase::Banner
            }
        ),
        "{e}"
    );
    // A receiver that accepts the request and never answers.
    let (client, mut server) = duplex(4096);
    let _fake = tokio::spawn(async move {
        server.write_all(b"% 220 hi\r\n% 300 ok\r\n").await.unwrap();
        let mut sink = [0u8; 1024];
        while server.read(&mut sink).await.unwrap_or(0) > 0 {}
    });
    let cfg = TransportConfig {
        transfer_timeout: Duration::from_secs(11),
        ..config()
    };
    let mut conn = CipConnection::negotiate(client, &cfg).await.unwrap();
    let e = conn.request(&Request::Noop).await.unwrap_err();
    assert!(
        matches!(
            e,
            TransportError::Timeout {
                phase: Phase::Transfer
            }
        ),
        "{e}"
    );
}

#[tokio::test]
async fn shutdown_finishes_the_current_request() {
    let gate = Arc::new(Notify::new());
    let handler = Arc::new(TestHandler {
        gate: Some(gate.clone()),
        ..TestHandler::default()
    });
    let token = CancellationToken::new();
    let (client, task) = spawn_server(handler, config(), token.clone());
    let (mut read, mut write) = tokio::io::split(client);
    write
        .write_all(b"# CIP-Version: 3\r\nContent-Type: application/index.cmd.noop\r\n\r\n.\r\n")
        .await
        .unwrap();
    // Wait until the server answered the version line; the noop is then in the handler.
    let mut seen = Vec::new();
    let mut buf = [0u8; 256];
    while !String::from_utf8_lossy(&seen).contains("% 300") {
        let n = read.read(&mut buf).await.unwrap();
        seen.extend_from_slice(&buf[..n]);
    }
    token.cancel();
    gate.notify_one();
    let rest = read_to_end(read).await;
    let all = String::from_utf8_lossy(&seen).into_owned() + &rest;
    assert!(
        all.ends_with(
            "% 200 MIME request received and processed\r\n% 520 server shutting down\r\n"
        ),
        "{all}"
    );
    task.await.unwrap().unwrap();
}

// ---- TLS ----

struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    fn new() -> Self {
        use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
        let dir = tempfile::tempdir().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
        std::fs::write(dir.path().join("ca.pem"), ca.pem()).unwrap();
        for (name, san) in [("server", "localhost"), ("client", "peer.example.net")] {
            let key = KeyPair::generate().unwrap();
            let cert = CertificateParams::new(vec![san.to_owned()])
                .unwrap()
                .signed_by(&key, &ca)
                .unwrap();
            std::fs::write(dir.path().join(format!("{name}.pem")), cert.pem()).unwrap();
            std::fs::write(dir.path().join(format!("{name}.key")), key.serialize_pem()).unwrap();
        }
        Self { dir }
    }

    fn path(&self, name: &str) -> std::path::PathBuf {
        self.dir.path().join(name)
    }
}

async fn tls_session(
    require_client_cert: bool,
    present_client_cert: bool,
) -> Result<Option<usize>, TransportError> {
    let pki = Pki::new();
    let ca = pki.path("ca.pem");
    let server_cfg = tls::server_config(
        &pki.path("server.pem"),
        &pki.path("server.key"),
        require_client_cert.then_some(ca.as_path()),
    )
    .unwrap();
    let (client_pem, client_key) = (pki.path("client.pem"), pki.path("client.key"));
    let client_cfg = tls::client_config(
        &ca,
        present_client_cert.then_some((client_pem.as_path(), client_key.as_path())),
    )
    .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let handler = Arc::new(TestHandler::default());
    let server_handler = handler.clone();
    let server = tokio::spawn(async move {
        let (tcp, remote) = listener.accept().await.unwrap();
        let (stream, certs) = tls_accept::accept(server_cfg, tcp, Duration::from_secs(10)).await?;
        let peer = PeerContext {
            remote,
            tls_peer_certificates: certs,
        };
        serve_connection(
            stream,
            peer,
            server_handler.as_ref(),
            &config(),
            CancellationToken::new(),
        )
        .await
    });
    let name = tls::server_name("localhost").unwrap();
    let outcome = async {
        let mut conn = CipClient::connect(addr, Some((client_cfg, name)), &config()).await?;
        let poll = Request::Poll {
            index_type: IndexType::tagged(),
            dsi: Dsi::new(DSI).unwrap(),
            params: vec![],
            body: Bytes::new(),
        };
        let reply = conn.request(&poll).await?;
        assert_eq!(reply.result.unwrap().objects, [tagged_object()]);
        conn.close().await
    }
    .await;
    let served = server.await.unwrap();
    outcome?;
    served?;
    let seen = handler.seen.lock().unwrap();
    Ok(seen[0].1)
}

#[tokio::test]
async fn tls_without_client_certificate() {
    assert_eq!(tls_session(false, false).await.unwrap(), None);
}

#[tokio::test]
async fn tls_with_client_certificate() {
    assert_eq!(tls_session(true, true).await.unwrap(), Some(1));
}

#[tokio::test]
async fn tls_missing_required_client_certificate_fails() {
    assert!(tls_session(true, false).await.is_err());
}

#[tokio::test]
async fn plain_tcp_session() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (tcp, remote) = listener.accept().await.unwrap();
        let peer = PeerContext {
            remote,
            tls_peer_certificates: None,
        };
        serve_connection(
            tcp,
            peer,
            &TestHandler::default(),
            &config(),
            CancellationToken::new(),
        )
        .await
    });
    let mut conn = CipClient::connect(("127.0.0.1", addr.port()), None, &config())
        .await
        .unwrap();
    assert_eq!(
        conn.request(&Request::Noop).await.unwrap().code,
        ResponseCode::Ok
    );
    conn.close().await.unwrap();
    server.await.unwrap().unwrap();
}
