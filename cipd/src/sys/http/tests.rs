//! The client against local servers: https with a test CA, gzip and deflate, a gzip bomb,
//! redirects (relative, protocol-relative, looping, https to http), client certificates,
//! connection reuse and a proxy.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::http::{HeaderMap as AxumHeaders, StatusCode as AxumStatus};
use axum::response::IntoResponse;
use axum::routing::{get as route_get, post as route_post};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;
use crate::sys::tls;

const LIMITS: FetchLimits = FetchLimits {
    timeout: Duration::from_secs(20),
    max_bytes: 1 << 20,
};

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn zlib(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

/// A test CA and a server certificate for `localhost` and 127.0.0.1, as PEM files; and a
/// client certificate signed by the same CA.
struct Pki {
    _dir: tempfile::TempDir,
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
    client_cert: PathBuf,
    client_key: PathBuf,
}

fn pki() -> Pki {
    let dir = tempfile::tempdir().unwrap();
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "cipd test CA");
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let sign = |names: Vec<String>| {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(names)
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    };
    let (server_pem, server_key) = sign(vec!["localhost".into(), "127.0.0.1".into()]);
    let (client_pem, client_key) = sign(vec!["client.test".into()]);
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    Pki {
        ca: write("ca.pem", &ca_cert.pem()),
        cert: write("cert.pem", &server_pem),
        key: write("key.pem", &server_key),
        client_cert: write("client.pem", &client_pem),
        client_key: write("client.key", &client_key),
        _dir: dir,
    }
}

fn client_with(ca: Option<&Path>, cert: Option<(&Path, &Path)>, proxy: ProxySetting) -> HttpClient {
    HttpClient::new(ClientSettings {
        user_agent: "cipd-test".into(),
        connect_timeout: Duration::from_secs(5),
        max_redirects: 3,
        proxy,
        tls: tls::web_client_config(ca, cert).unwrap(),
        resolve: Vec::new(),
        read_timeout: None,
    })
    .unwrap()
}

fn client(ca: Option<&Path>) -> HttpClient {
    client_with(ca, None, ProxySetting::Direct)
}

fn app(plain_base: Option<String>) -> Router {
    let bomb = Bytes::from(gzip(&vec![0u8; 10 << 20]));
    let feed = Bytes::from(gzip("t\u{3000}x\n".repeat(100).as_bytes()));
    let to_http = plain_base.unwrap_or_default();
    Router::new()
        .route(
            "/plain",
            route_get(|headers: AxumHeaders| async move {
                if headers.get("if-modified-since").is_some() {
                    return AxumStatus::NOT_MODIFIED.into_response();
                }
                (
                    [("last-modified", "Sun, 06 Nov 1994 08:49:37 GMT")],
                    "hello",
                )
                    .into_response()
            }),
        )
        .route(
            "/gzip",
            route_get(|headers: AxumHeaders| async move {
                let accepts = headers
                    .get("accept-encoding")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_owned();
                assert!(accepts.contains("gzip"), "{accepts}");
                ([("content-encoding", "gzip")], gzip(b"zipped hello"))
            }),
        )
        .route(
            "/deflate",
            route_get(|| async { ([("content-encoding", "deflate")], zlib(b"deflated hello")) }),
        )
        .route(
            "/bomb",
            route_get(move || {
                let bomb = bomb.clone();
                async move { ([("content-encoding", "gzip")], bomb) }
            }),
        )
        .route(
            "/feed.di.gz",
            route_get(move || {
                let feed = feed.clone();
                async move { ([("content-type", "application/gzip")], feed) }
            }),
        )
        .route(
            "/moved",
            route_get(|| async { (AxumStatus::FOUND, [("location", "/plain")]) }),
        )
        .route(
            "/loop",
            route_get(|| async { (AxumStatus::FOUND, [("location", "/loop")]) }),
        )
        .route(
            "/to-http",
            route_get(move || {
                let to = format!("{to_http}/plain");
                async move { (AxumStatus::FOUND, [("location", to)]) }
            }),
        )
        .route("/gone", route_get(|| async { AxumStatus::NOT_FOUND }))
        .route("/echo", route_post(|body: Bytes| async move { body }))
}

/// Serves `app` over plain HTTP; the counter counts accepted connections.
async fn serve_plain(app: Router) -> (String, Arc<AtomicUsize>) {
    serve(app, None).await
}

async fn serve(app: Router, tls: Option<Arc<rustls::ServerConfig>>) -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    let scheme = if tls.is_some() { "https" } else { "http" };
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            count.fetch_add(1, Ordering::SeqCst);
            let app = app.clone();
            let tls = tls.clone();
            tokio::spawn(async move {
                let service = hyper_util::service::TowerToHyperService::new(app);
                let http = hyper::server::conn::http1::Builder::new();
                match tls {
                    None => {
                        let _ = http.serve_connection(TokioIo::new(tcp), service).await;
                    }
                    Some(cfg) => {
                        let Ok(stream) = tokio_rustls::TlsAcceptor::from(cfg).accept(tcp).await
                        else {
                            return;
                        };
                        let _ = http.serve_connection(TokioIo::new(stream), service).await;
                    }
                }
            });
        }
    });
    (format!("{scheme}://{addr}"), accepted)
}

async fn serve_tls(app: Router, pki: &Pki, client_ca: bool) -> (String, Arc<AtomicUsize>) {
    let cfg =
        tls::server_config(&pki.cert, &pki.key, client_ca.then_some(pki.ca.as_path())).unwrap();
    serve(app, Some(cfg)).await
}

#[tokio::test]
async fn https_gzip_deflate_redirects_and_reuse() {
    let pki = pki();
    let (plain, _) = serve_plain(app(None)).await;
    let (base, accepted) = serve_tls(app(Some(plain.clone())), &pki, false).await;
    let c = client(Some(&pki.ca));

    let got = c.get(&format!("{base}/plain"), None, LIMITS).await.unwrap();
    assert_eq!(
        got,
        Fetched::Body {
            bytes: Bytes::from_static(b"hello"),
            last_modified: Some("Sun, 06 Nov 1994 08:49:37 GMT".into()),
            content_type: Some("text/plain; charset=utf-8".into()),
        }
    );
    let again = c
        .get(
            &format!("{base}/plain"),
            Some("Sun, 06 Nov 1994 08:49:37 GMT"),
            LIMITS,
        )
        .await
        .unwrap();
    assert_eq!(again, Fetched::NotModified);
    // One connection served both: it was kept alive and reused.
    assert_eq!(accepted.load(Ordering::SeqCst), 1);

    let body = |f: Fetched| match f {
        Fetched::Body { bytes, .. } => bytes,
        Fetched::NotModified => panic!("not modified"),
    };
    let zipped = c.get(&format!("{base}/gzip"), None, LIMITS).await.unwrap();
    assert_eq!(body(zipped), Bytes::from_static(b"zipped hello"));
    let deflated = c
        .get(&format!("{base}/deflate"), None, LIMITS)
        .await
        .unwrap();
    assert_eq!(body(deflated), Bytes::from_static(b"deflated hello"));

    // Relative and protocol-relative redirects stay on this server.
    let moved = c.get(&format!("{base}/moved"), None, LIMITS).await.unwrap();
    assert_eq!(body(moved), Bytes::from_static(b"hello"));
    let port = base.rsplit(':').next().unwrap();
    let relative = c
        .get_any(&format!("{base}/moved"), HeaderMap::new(), LIMITS)
        .await
        .unwrap();
    assert_eq!(relative.url, format!("https://127.0.0.1:{port}/plain"));

    let looped = c
        .get(&format!("{base}/loop"), None, LIMITS)
        .await
        .unwrap_err();
    assert!(
        matches!(looped, FetchError::Redirects { limit: 3, .. }),
        "{looped}"
    );
    let downgrade = c
        .get(&format!("{base}/to-http"), None, LIMITS)
        .await
        .unwrap_err();
    assert!(
        matches!(downgrade, FetchError::InsecureRedirect { .. }),
        "{downgrade}"
    );
    let gone = c
        .get(&format!("{base}/gone"), None, LIMITS)
        .await
        .unwrap_err();
    assert!(gone.to_string().contains("404"), "{gone}");

    let echo = c
        .post(
            &format!("{base}/echo"),
            HeaderMap::new(),
            Bytes::from_static(b"posted"),
            LIMITS,
        )
        .await
        .unwrap();
    assert_eq!(echo.status, StatusCode::OK);
    assert_eq!(echo.body, Bytes::from_static(b"posted"));

    // A .di.gz file arrives as it is and is decoded by gunzip_file.
    let file = body(
        c.get(&format!("{base}/feed.di.gz"), None, LIMITS)
            .await
            .unwrap(),
    );
    let text = gunzip_file(file.clone(), 1 << 20).unwrap();
    assert_eq!(text, "t\u{3000}x\n".repeat(100).as_bytes());
    assert!(
        gunzip_file(file, 100)
            .unwrap_err()
            .contains("larger than 100")
    );
    assert_eq!(
        gunzip_file(Bytes::from_static(b"plain"), 3).unwrap(),
        Bytes::from_static(b"plain")
    );
    let broken = Bytes::from(gzip(b"abcdef")[..12].to_vec());
    assert!(
        gunzip_file(broken, 100)
            .unwrap_err()
            .contains("not valid gzip")
    );
}

#[tokio::test]
async fn a_gzip_bomb_stops_at_the_decoded_limit() {
    let (base, _) = serve_plain(app(None)).await;
    let c = client(None);
    let err = c
        .get(&format!("{base}/bomb"), None, LIMITS)
        .await
        .unwrap_err();
    assert!(
        matches!(err, FetchError::TooLarge { limit, .. } if limit == 1 << 20),
        "{err}"
    );
}

#[tokio::test]
async fn an_unknown_ca_and_a_missing_client_certificate_are_refused() {
    let pki = pki();
    let (base, _) = serve_tls(app(None), &pki, false).await;
    let err = client(None)
        .get(&format!("{base}/plain"), None, LIMITS)
        .await
        .unwrap_err();
    assert!(matches!(err, FetchError::Connect { .. }), "{err}");
    assert!(
        err.to_string().to_lowercase().contains("certificate"),
        "{err}"
    );

    let (mutual, _) = serve_tls(app(None), &pki, true).await;
    let without = client(Some(&pki.ca))
        .get(&format!("{mutual}/plain"), None, LIMITS)
        .await;
    assert!(without.is_err(), "{without:?}");
    let with = client_with(
        Some(&pki.ca),
        Some((&pki.client_cert, &pki.client_key)),
        ProxySetting::Direct,
    )
    .get(&format!("{mutual}/plain"), None, LIMITS)
    .await
    .unwrap();
    assert!(matches!(with, Fetched::Body { .. }));
}

#[tokio::test]
async fn bad_urls_and_silent_servers() {
    let c = client(None);
    for url in ["ftp://x.example/", "not a url", "http://"] {
        let err = c.get(url, None, LIMITS).await.unwrap_err();
        assert!(matches!(err, FetchError::BadUrl { .. }), "{url}: {err}");
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let _hold = tokio::spawn(async move {
        let (_s, _) = listener.accept().await.unwrap();
        std::future::pending::<()>().await;
    });
    let limits = FetchLimits {
        timeout: Duration::from_millis(300),
        ..LIMITS
    };
    let err = c
        .get(&format!("http://{addr}/"), None, limits)
        .await
        .unwrap_err();
    assert!(matches!(err, FetchError::Timeout { .. }), "{err}");
    // A refused connection says so once, naming the URL once.
    drop(_hold);
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dead = closed.local_addr().unwrap();
    drop(closed);
    let err = c
        .get(&format!("http://{dead}/x"), None, LIMITS)
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, FetchError::Connect { .. }), "{text}");
    assert_eq!(text.matches(&dead.to_string()).count(), 1, "{text}");
    assert!(text.to_lowercase().contains("refused"), "{text}");
}

/// A forward proxy: absolute-form requests are passed on, `CONNECT` opens a tunnel. Every
/// request line it saw is kept.
async fn proxy() -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut inbound, _)) = listener.accept().await else {
                return;
            };
            let log = log.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if inbound.read(&mut byte).await.unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(byte[0]);
                }
                let text = String::from_utf8_lossy(&head).into_owned();
                let line = text.lines().next().unwrap_or("").to_owned();
                log.lock().unwrap().push(line.clone());
                let target = line.split(' ').nth(1).unwrap_or("").to_owned();
                if let Some(authority) = line
                    .strip_prefix("CONNECT ")
                    .and_then(|r| r.split(' ').next())
                {
                    let Ok(mut outbound) = tokio::net::TcpStream::connect(authority).await else {
                        return;
                    };
                    let _ = inbound
                        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                        .await;
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                } else {
                    let authority = target
                        .strip_prefix("http://")
                        .and_then(|r| r.split('/').next())
                        .unwrap_or("")
                        .to_owned();
                    let Ok(mut outbound) = tokio::net::TcpStream::connect(authority).await else {
                        return;
                    };
                    let _ = outbound.write_all(&head).await;
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    (addr, seen)
}

#[tokio::test]
async fn requests_go_through_a_proxy() {
    let pki = pki();
    let (plain, _) = serve_plain(app(None)).await;
    let (secure, _) = serve_tls(app(None), &pki, false).await;
    let (proxy_addr, seen) = proxy().await;
    let c = client_with(
        Some(&pki.ca),
        None,
        ProxySetting::Url(format!("http://{proxy_addr}")),
    );
    let got = c
        .get(&format!("{plain}/plain"), None, LIMITS)
        .await
        .unwrap();
    assert!(matches!(got, Fetched::Body { .. }));
    let got = c
        .get(&format!("{secure}/gzip"), None, LIMITS)
        .await
        .unwrap();
    assert!(matches!(got, Fetched::Body { .. }));
    let seen = seen.lock().unwrap().clone();
    assert!(
        seen.iter()
            .any(|l| l.starts_with(&format!("GET {plain}/plain "))),
        "{seen:?}"
    );
    let secure_authority = secure.trim_start_matches("https://");
    assert!(
        seen.iter()
            .any(|l| l.starts_with(&format!("CONNECT {secure_authority} "))),
        "{seen:?}"
    );
}

/// A listener that takes no more connections: its accept queue is full and never drained,
/// so the kernel drops further SYNs and a connect to it hangs (a dead address, on loopback).
fn dead_address() -> (
    SocketAddr,
    tokio::net::TcpListener,
    Vec<std::net::TcpStream>,
) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(0).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut fillers = Vec::new();
    for _ in 0..4 {
        let s = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200));
        match s {
            Ok(s) => fillers.push(s),
            Err(_) => break,
        }
    }
    (addr, listener, fillers)
}

/// A name whose first address is dead: the connect timeout is split across the addresses,
/// so the second is tried in time and the fetch succeeds well within its own deadline.
#[tokio::test]
async fn a_dead_first_address_does_not_use_up_the_fetch() {
    let (dead, _listener, _fillers) = dead_address();
    let (base, _) = serve_plain(app(None)).await;
    let live: SocketAddr = base.trim_start_matches("http://").parse().unwrap();
    let c = HttpClient::new(ClientSettings {
        user_agent: "cipd-test".into(),
        connect_timeout: Duration::from_secs(2),
        max_redirects: 3,
        proxy: ProxySetting::Direct,
        tls: tls::web_client_config(None, None).unwrap(),
        resolve: vec![("feed.test".into(), vec![dead, live])],
        read_timeout: None,
    })
    .unwrap();
    let limits = FetchLimits {
        timeout: Duration::from_secs(8),
        ..LIMITS
    };
    let got = c
        .get(
            &format!("http://feed.test:{}/plain", live.port()),
            None,
            limits,
        )
        .await
        .unwrap();
    assert!(matches!(got, Fetched::Body { .. }));
    // The dead address alone: the connect times out (it is dead, not refusing).
    let alone = HttpClient::new(ClientSettings {
        user_agent: "cipd-test".into(),
        connect_timeout: Duration::from_millis(500),
        max_redirects: 3,
        proxy: ProxySetting::Direct,
        tls: tls::web_client_config(None, None).unwrap(),
        resolve: vec![("feed.test".into(), vec![dead])],
        read_timeout: None,
    })
    .unwrap();
    let err = alone
        .get("http://feed.test/plain", None, limits)
        .await
        .unwrap_err();
    assert!(matches!(err, FetchError::Connect { .. }), "{err}");
    // The connect deadline, or (on a loaded machine, where the full accept queue may let
    // one more connection through that then never answers) the kernel's own timeout.
    let text = err.to_string();
    assert!(
        text.contains("deadline has elapsed") || text.contains("timed out"),
        "{err}"
    );
}
