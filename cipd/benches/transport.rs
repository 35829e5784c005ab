//! The CIP stream transport over loopback TCP.
//!
//! Run with `cargo bench -p cipd --bench transport`. One connection, sequential exchanges:
//! prints noop requests/s with latency percentiles, and MB/s for polls answered with a 1 MiB
//! result.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use cip_proto::Dsi;
use cip_proto::cip::{IndexObject, IndexType, PollResult, Request, ResponseCode};
use cipd::transport::{
    CipClient, PeerContext, Reply, RequestHandler, TransportConfig, serve_connection,
};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

const MIB: usize = 1024 * 1024;

struct Handler {
    result: PollResult,
}

impl RequestHandler for Handler {
    async fn handle(&self, request: Request, _peer: &PeerContext) -> Reply {
        match request {
            Request::Poll { .. } => Reply::result(self.result.clone()),
            _ => Reply::ok(),
        }
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime starts");
    runtime.block_on(run());
}

async fn run() {
    let payload: Vec<u8> = (0..MIB)
        .map(|i| b"abcdefghij klmnopqrstuvwxyz\r\n"[i % 29])
        .collect();
    let object = IndexObject {
        index_type: IndexType::harvest_soif(),
        dsi: Dsi::new("1.3.6.1.4.1.99999.7").expect("valid dsi"),
        base_uris: vec!["http://cip.example.net/".into()],
        dsi_description: None,
        payload: Bytes::from(payload),
    };
    let handler = Arc::new(Handler {
        result: PollResult {
            objects: vec![object],
        },
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local addr");
    let token = CancellationToken::new();
    let server_token = token.clone();
    let server = tokio::spawn(async move {
        let config = TransportConfig::default();
        while let Ok((tcp, remote)) = listener.accept().await {
            tcp.set_nodelay(true).expect("nodelay");
            let peer = PeerContext {
                remote,
                tls_peer_certificates: None,
            };
            let (h, c, t) = (handler.clone(), config.clone(), server_token.clone());
            tokio::spawn(async move { serve_connection(tcp, peer, h.as_ref(), &c, t).await });
        }
    });

    let config = TransportConfig::default();
    let mut conn = CipClient::connect(addr, None, &config)
        .await
        .expect("connect");

    let mut latencies = Vec::new();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(2) {
        let t = Instant::now();
        let reply = conn.request(&Request::Noop).await.expect("noop");
        assert_eq!(reply.code, ResponseCode::Ok);
        latencies.push(t.elapsed());
    }
    let elapsed = start.elapsed();
    latencies.sort();
    let pct = |p: f64| latencies[((latencies.len() - 1) as f64 * p) as usize];
    println!(
        "noop over loopback TCP: {:.0} requests/s, p50 {:?}, p99 {:?} ({} requests)",
        latencies.len() as f64 / elapsed.as_secs_f64(),
        pct(0.50),
        pct(0.99),
        latencies.len()
    );

    let poll = Request::Poll {
        index_type: IndexType::harvest_soif(),
        dsi: Dsi::new("1.3.6.1.4.1.99999.7").expect("valid dsi"),
        params: vec![],
        body: Bytes::new(),
    };
    let mut n = 0usize;
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(3) {
        let reply = conn.request(&poll).await.expect("poll");
        assert_eq!(reply.result.map(|r| r.objects.len()), Some(1));
        n += 1;
    }
    let elapsed = start.elapsed();
    println!(
        "1 MiB poll result over loopback TCP (build, frame, send, unframe, parse): {:.0} MB/s, {:.0} polls/s",
        (n * MIB) as f64 / elapsed.as_secs_f64() / 1e6,
        n as f64 / elapsed.as_secs_f64()
    );
    conn.close().await.expect("close");
    token.cancel();
    server.abort();
}
