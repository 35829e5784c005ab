//! A fake CIP peer: answers every poll with whatever index object the test sets, so tests
//! can play a forger, an inflater or hundreds of big peers without running daemons.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use cip_proto::Dsi;
use cip_proto::cip::{IndexObject, IndexType, PollResult, Request};
use cipd::transport::{PeerContext, Reply, RequestHandler, TransportConfig, serve_connection};
use hints::hint::{AttrSpec, CipHint};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// A CIP-HINT with one `DOCUMENT:Author` weightlist.
pub fn author_hint(total: u64, values: &[(&str, u64)]) -> CipHint {
    let spec = AttrSpec::new("DOCUMENT", "Author").unwrap();
    CipHint::with_weightlist(spec, total, values.iter().copied())
}

/// An index object carrying `hint` for `dsi`, with `base` as base-uri.
pub fn object(dsi: &str, base: &str, hint: &CipHint) -> IndexObject {
    IndexObject {
        index_type: IndexType::harvest_soif(),
        dsi: Dsi::new(dsi).unwrap(),
        base_uris: vec![base.to_owned()],
        dsi_description: None,
        payload: Bytes::from(hint.to_soif().to_bytes()),
    }
}

struct Handler {
    object: Arc<Mutex<IndexObject>>,
    /// Objects sent after it (passed-on datasets).
    extra: Arc<Mutex<Vec<IndexObject>>>,
    datachanged: Arc<std::sync::atomic::AtomicUsize>,
}

impl RequestHandler for Handler {
    async fn handle(&self, request: Request, _peer: &PeerContext) -> Reply {
        match request {
            Request::Poll { .. } => {
                let mut objects = vec![self.object.lock().unwrap().clone()];
                objects.extend(self.extra.lock().unwrap().iter().cloned());
                Reply::result(PollResult { objects })
            }
            Request::DataChanged { .. } => {
                self.datachanged
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Reply::ok()
            }
            _ => Reply::ok(),
        }
    }
}

/// A running fake peer on 127.0.0.1.
pub struct FakePeer {
    pub addr: SocketAddr,
    object: Arc<Mutex<IndexObject>>,
    extra: Arc<Mutex<Vec<IndexObject>>>,
    datachanged: Arc<std::sync::atomic::AtomicUsize>,
    token: CancellationToken,
}

impl FakePeer {
    /// Serves `object` to every poll until dropped.
    pub async fn start(object: IndexObject) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let object = Arc::new(Mutex::new(object));
        let extra = Arc::new(Mutex::new(Vec::new()));
        let token = CancellationToken::new();
        let datachanged = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let handler = Arc::new(Handler {
            object: object.clone(),
            extra: extra.clone(),
            datachanged: datachanged.clone(),
        });
        let t = token.clone();
        tokio::spawn(async move {
            loop {
                let (stream, remote) = tokio::select! {
                    r = listener.accept() => match r { Ok(x) => x, Err(_) => continue },
                    () = t.cancelled() => return,
                };
                let (h, t) = (handler.clone(), t.clone());
                tokio::spawn(async move {
                    let ctx = PeerContext {
                        remote,
                        tls_peer_certificates: None,
                    };
                    let _ =
                        serve_connection(stream, ctx, h.as_ref(), &TransportConfig::default(), t)
                            .await;
                });
            }
        });
        Self {
            addr,
            object,
            extra,
            datachanged,
            token,
        }
    }

    /// `datachanged` notices received so far.
    pub fn datachanged(&self) -> usize {
        self.datachanged.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Sends `objects` after the first in every answer from now on (passed-on datasets).
    pub fn set_extra(&self, objects: Vec<IndexObject>) {
        *self.extra.lock().unwrap() = objects;
    }

    /// Serves `object` from now on.
    pub fn set(&self, object: IndexObject) {
        *self.object.lock().unwrap() = object;
    }
}

impl Drop for FakePeer {
    fn drop(&mut self) {
        self.token.cancel();
    }
}
