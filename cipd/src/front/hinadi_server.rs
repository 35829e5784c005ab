//! This node's Hina-Di file, served on the HTTP listener (`GET /hina.di` by default).
//!
//! It holds the node's own objects that have an absolute URL and a date
//! ([`hinadi::soif::from_summary`], `Method: FILE/200`, authorized by this node), and the
//! Hina-Di blocks of its `hinadi` collections that a trusted agent vouches for, re-published
//! by the spec's rule ([`propagate::republish`]). The file is built on the blocking pool once
//! per local-index generation, configuration and charset, and cached; `Last-Modified` is the
//! time it was built, and `If-Modified-Since` gets a 304.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bytes::Bytes;
use cip_proto::hinadi::{self, Field, HeaderOut, date, propagate};
use encoding_rs::Encoding;
use serde::Deserialize;

use crate::front::api::ApiError;
use crate::node::Node;
use crate::store::local_index::LocalIndex;

/// The charsets the file is served in.
pub const CHARSETS: [&Encoding; 4] = [
    encoding_rs::UTF_8,
    encoding_rs::EUC_JP,
    encoding_rs::SHIFT_JIS,
    encoding_rs::ISO_2022_JP,
];

/// A built file.
#[derive(Debug)]
pub struct Document {
    /// The encoded file.
    pub bytes: Bytes,
    /// When it was built (Unix seconds): its `Last-Modified` and header `Date`.
    pub built: i64,
    /// Entity blocks in it.
    pub blocks: usize,
    /// Blocks left out because the charset cannot hold them or the block limit was hit.
    pub left_out: usize,
    /// Rebuilt after this (Unix seconds), so the `Expires` of own entries served from the
    /// cache stays at least half their expiry period ahead.
    pub fresh_until: i64,
}

/// What goes into the file besides the local objects.
#[derive(Debug, Clone)]
pub struct Inputs<'a> {
    /// Hina-Di settings (trust, what to serve, the block limit, expiry).
    pub config: &'a crate::model::config::HinaDiConfig,
    /// The collections' settings, for each one's expiry.
    pub collections: &'a [crate::model::config::CollectionConfig],
    /// This node's URL, for `Authorized-url` on its own entries.
    pub authorized_url: Option<&'a str>,
    /// The charset.
    pub charset: &'static Encoding,
    /// Build time, Unix seconds.
    pub now: i64,
}

/// Builds the file from `local` (blocking: it reads the collection stores).
pub fn build(local: &LocalIndex, inputs: &Inputs<'_>) -> Document {
    let cfg = inputs.config;
    let agent = crate::pipeline::hinadi_feed::user_agent();
    let mut out = Vec::new();
    #[allow(
        clippy::expect_used,
        reason = "the agent string and charset names are plain ASCII values"
    )]
    hinadi::write_header(
        &mut out,
        &HeaderOut {
            user_agent: &agent,
            charset: inputs.charset,
            date: Some(inputs.now),
        },
    )
    .expect("the header is plain ASCII");
    let mut seen: HashSet<String> = HashSet::new();
    let (mut blocks, mut left_out) = (0usize, 0usize);
    let mut fresh_until = i64::MAX;
    for (status, store) in local.collection_stores() {
        // Own entries say when this node read them and how long a reader may trust them.
        let expiry = inputs
            .collections
            .iter()
            .find(|c| c.name == status.name)
            .map_or(crate::model::config::DEFAULT_HINADI_EXPIRES, |c| {
                cfg.expiry(c)
            });
        let expiry = i64::try_from(expiry.as_secs())
            .unwrap_or(i64::MAX / 4)
            .max(1);
        let detected = status
            .loaded
            .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
            .map_or(inputs.now, |d| d.as_secs() as i64)
            .min(inputs.now);
        let mut own = 0usize;
        let scanned = store.scan(&mut |_, obj| {
            let block = if let Some(b) = hinadi::soif::to_block(&obj) {
                if !cfg.propagate || propagate::check(&b, &cfg.trusted).is_err() {
                    return;
                }
                propagate::republish(&b)
            } else if cfg.local {
                let Some(mut b) = hinadi::soif::from_summary(&obj) else {
                    return;
                };
                b.fields.push(Field::new("Authorized", agent.clone()));
                if let Some(u) = inputs.authorized_url {
                    b.fields.push(Field::new("Authorized-url", u));
                }
                b.fields.push(Field::new("Method", "FILE/200"));
                b.fields
                    .push(Field::new("Last-Modified-Detected", date::format(detected)));
                // Both spellings: WDB 2.10 trusts `Expires` only when it is at least six
                // hours ahead, and falls back to the older `Expire` (PROTOCOL.md).
                let expires = date::format(inputs.now.saturating_add(expiry));
                b.fields.push(Field::new("Expires", expires.clone()));
                b.fields.push(Field::new("Expire", expires));
                own += 1;
                b
            } else {
                return;
            };
            let Some(url) = block.url() else { return };
            if blocks >= cfg.max_blocks {
                left_out += 1;
                return;
            }
            if !seen.insert(url.to_owned()) {
                return;
            }
            match hinadi::write_block(&mut out, &block, inputs.charset) {
                Ok(()) => blocks += 1,
                Err(e) => {
                    left_out += 1;
                    tracing::debug!(url, error = %e, "left out of the hina-di file");
                }
            }
        });
        if let Err(e) = scanned {
            tracing::warn!(error = %e, "a collection could not be read for the hina-di file");
        }
        if own > 0 {
            fresh_until =
                fresh_until.min(inputs.now.saturating_add(expiry / 2).max(inputs.now + 1));
        }
    }
    if left_out > 0 {
        tracing::info!(
            left_out,
            charset = inputs.charset.name(),
            max_blocks = cfg.max_blocks,
            "entries left out of the hina-di file (charset cannot hold them, or the block limit)"
        );
    }
    Document {
        bytes: Bytes::from(out),
        built: inputs.now,
        blocks,
        left_out,
        fresh_until,
    }
}

/// The local-index generation, and a digest of what else shapes the file (the `[hinadi]`
/// settings and this node's URL).
type CacheKey = (u64, u64);

/// The route's state: the node and the built files.
pub struct Server {
    node: Arc<Node>,
    cache: Mutex<(CacheKey, HashMap<&'static str, Arc<Document>>)>,
    building: tokio::sync::Mutex<()>,
    /// The build time of the newest file: a new file is stamped at least a second later,
    /// so `If-Modified-Since` (whole seconds) never hides a change made within a second.
    last_built: std::sync::atomic::AtomicI64,
}

impl Server {
    /// A server for `node`.
    pub fn new(node: Arc<Node>) -> Self {
        Self {
            node,
            cache: Mutex::new(((0, 0), HashMap::new())),
            building: tokio::sync::Mutex::new(()),
            last_built: std::sync::atomic::AtomicI64::new(i64::MIN),
        }
    }

    fn key(&self) -> CacheKey {
        use std::hash::{Hash, Hasher};
        let config = self.node.config();
        let mut h = std::hash::DefaultHasher::new();
        format!("{:?}", config.hinadi).hash(&mut h);
        self.node.identity().base_uris.hash(&mut h);
        (self.node.local().generation, h.finish())
    }

    fn cached(&self, key: CacheKey, charset: &'static Encoding) -> Option<Arc<Document>> {
        let c = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        (c.0 == key)
            .then(|| c.1.get(charset.name()).cloned())
            .flatten()
            .filter(|d| unix_now() < d.fresh_until)
    }

    /// The file in `charset`, built if the cached one is out of date. One build at a time.
    ///
    /// # Errors
    /// When the build task fails.
    pub async fn document(&self, charset: &'static Encoding) -> Result<Arc<Document>, ApiError> {
        if let Some(d) = self.cached(self.key(), charset) {
            return Ok(d);
        }
        let _one = self.building.lock().await;
        let key = self.key();
        if let Some(d) = self.cached(key, charset) {
            return Ok(d);
        }
        let node = self.node.clone();
        let now = unix_now();
        let previous = self.last_built.load(std::sync::atomic::Ordering::Relaxed);
        // Files of one generation in other charsets share its stamp.
        let now = match self.cache.lock().unwrap_or_else(|e| e.into_inner()) {
            c if c.0 == key && c.1.values().any(|d| now < d.fresh_until) => previous,
            _ => now.max(previous.saturating_add(1)),
        };
        let doc = crate::sys::net::spawn_blocking(move || {
            let config = node.config();
            let identity = node.identity();
            let local = node.local();
            build(
                &local,
                &Inputs {
                    config: &config.hinadi,
                    collections: &config.collections,
                    authorized_url: identity.base_uris.first().map(String::as_str),
                    charset,
                    now,
                },
            )
        })
        .await
        .map_err(|e| ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            kind: "internal",
            message: format!("building the hina-di file failed: {e}"),
        })?;
        let doc = Arc::new(doc);
        self.last_built
            .store(doc.built, std::sync::atomic::Ordering::Relaxed);
        let mut c = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if c.0 != key {
            *c = (key, HashMap::new());
        }
        c.1.insert(charset.name(), doc.clone());
        Ok(doc)
    }
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Parameters of the Hina-Di route.
#[derive(Debug, Deserialize)]
pub struct Args {
    /// `utf-8` (default), `euc-jp`, `shift_jis` or `iso-2022-jp`.
    pub charset: Option<String>,
}

/// The route at `path`.
pub fn routes(node: Arc<Node>, path: &str) -> Router {
    Router::new()
        .route(path, get(serve))
        .with_state(Arc::new(Server::new(node)))
}

/// The charset a `?charset=` label asks for.
///
/// # Errors
/// A 400 for a label that is not one of [`CHARSETS`].
pub fn pick_charset(label: Option<&str>) -> Result<&'static Encoding, ApiError> {
    let Some(label) = label else {
        return Ok(encoding_rs::UTF_8);
    };
    hinadi::charset(label)
        .filter(|e| CHARSETS.contains(e))
        .ok_or_else(|| ApiError {
            status: StatusCode::BAD_REQUEST,
            kind: "bad-parameter",
            message: format!("charset={label:?}: expected utf-8, euc-jp, shift_jis or iso-2022-jp"),
        })
}

async fn serve(
    State(server): State<Arc<Server>>,
    headers: HeaderMap,
    Query(args): Query<Args>,
) -> Result<Response, ApiError> {
    let charset = pick_charset(args.charset.as_deref())?;
    let doc = server.document(charset).await?;
    crate::sys::metrics::Metrics::inc(&server.node.metrics().hinadi_served);
    let last_modified = date::format(doc.built);
    let fresh = headers
        .get(header::IF_MODIFIED_SINCE)
        .and_then(|v| v.to_str().ok())
        .and_then(cip_proto::http_date::parse)
        .is_some_and(|since| since >= doc.built);
    if fresh {
        return Ok((
            StatusCode::NOT_MODIFIED,
            [(header::LAST_MODIFIED, last_modified)],
        )
            .into_response());
    }
    Ok((
        [
            (
                header::CONTENT_TYPE,
                format!("text/plain; charset={}", charset.name()),
            ),
            (header::LAST_MODIFIED, last_modified),
        ],
        doc.bytes.clone(),
    )
        .into_response())
}
