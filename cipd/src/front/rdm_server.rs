//! The RDM server: `/rdm/incoming` on the HTTP listener, by `POST` (`application/x-rdm`)
//! and by `GET` with form-encoded attributes. Each collection is a catalog, named in CSIDs
//! `x-catalog://<host>/<collection name>`.
//!
//! What each type gets, and every decision, is in `PROTOCOL.md` (RDM). Whole catalogs are
//! streamed from the store's file (with an exact `Content-Length`); filtered answers are
//! streamed object by object; only an ordered view buffers, up to `rdm.max_ordered` RDs.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::Router;
use axum::body::{Body, HttpBody};
use axum::extract::{ConnectInfo, Query as Form, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bytes::Bytes;
use cip_proto::hinadi::date;
use cip_proto::rdm::{
    self, Body as RdmBody, Csid, GathererScope, Header, Message, RdmType, Schema, SchemaEntry,
    SchemaScope, ServerDescription, Taxonomy, TaxonomyScope, View,
};
use cip_proto::soif::{Limits, SoifObject};
use tokio::sync::mpsc;

use crate::model::config::{CollectionConfig, Config, SourceConfig};
use crate::node::Node;
use crate::store::journal;
use crate::store::local::CollectionStore;

/// The query languages this server answers.
pub const QUERY_LANGUAGES: [&str; 5] = [
    "gatherer",
    "cip-query",
    "cip-referral",
    "schema-basic",
    "taxonomy-basic",
];

/// The route set at `path`.
pub fn routes(node: Arc<Node>, path: &str) -> Router {
    Router::new()
        .route(path, get(by_get).post(by_post))
        .with_state(node)
}

/// A refusal: HTTP status and the `RDM-Error-Message`.
#[derive(Debug)]
pub struct Failure {
    status: StatusCode,
    message: String,
}

fn fail(status: StatusCode, message: impl Into<String>) -> Failure {
    Failure {
        status,
        message: message.into(),
    }
}

fn expires(node: &Node) -> HeaderValue {
    let secs = journal::now() + node.config().rdm.expires.as_secs() as i64;
    HeaderValue::from_str(&date::format(secs)).unwrap_or(HeaderValue::from_static("0"))
}

fn respond(node: &Node, status: StatusCode, body: Body) -> Response {
    crate::sys::metrics::Metrics::inc(&node.metrics().rdm_requests);
    let mut r = (status, body).into_response();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(rdm::CONTENT_TYPE),
    );
    h.insert(header::EXPIRES, expires(node));
    r
}

fn whole(node: &Node, status: StatusCode, msg: &Message) -> Response {
    respond(node, status, Body::from(msg.write()))
}

/// A `status-response`: `RDM-Error-Message` when failing, and the HTML 2.0 status body.
fn status_response(node: &Node, status: StatusCode, error: Option<&str>, text: &str) -> Response {
    let header = Header {
        error_message: error.map(str::to_owned),
        ..Header::new(RdmType::StatusResponse)
    };
    let title = if error.is_some() {
        format!("RDM error {}", status.as_u16())
    } else {
        "RDM status".to_owned()
    };
    let msg = Message::new(header, RdmBody::Html(rdm::status_html(&title, text)));
    whole(node, status, &msg)
}

fn failure(node: &Node, f: &Failure) -> Response {
    tracing::debug!(status = f.status.as_u16(), message = %f.message, "rdm request refused");
    status_response(node, f.status, Some(&f.message), &f.message)
}

async fn by_get(
    State(node): State<Arc<Node>>,
    headers: HeaderMap,
    Form(form): Form<Vec<(String, String)>>,
) -> Response {
    match from_form(&form) {
        Ok(msg) => answer(node, msg, None, host(&headers)).await,
        Err(f) => failure(&node, &f),
    }
}

/// Builds the request a GET form describes (`type`, `ql`, `scope`, `view-hits`,
/// `view-attributes`, `view-order`, `csid`; names ignore case).
fn from_form(form: &[(String, String)]) -> Result<Message, Failure> {
    let get = |k: &str| {
        form.iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(k))
            .map(|(_, v)| v.as_str())
    };
    let ty = get("type").ok_or_else(|| {
        fail(
            StatusCode::BAD_REQUEST,
            "the type parameter (an RDM-Type) is required",
        )
    })?;
    let rdm_type = RdmType::from_name(ty)
        .ok_or_else(|| fail(StatusCode::BAD_REQUEST, format!("unknown RDM-Type {ty:?}")))?;
    let csid = match get("csid") {
        Some(c) => Some(Csid::parse(c).map_err(|e| fail(StatusCode::BAD_REQUEST, e.to_string()))?),
        None => None,
    };
    let view = View::parse(get("view-attributes"), get("view-hits"), get("view-order"))
        .map_err(|e| fail(StatusCode::BAD_REQUEST, e.to_string()))?;
    let scope = get("scope").map(str::to_owned);
    let body = if scope.is_some() || !view.is_empty() {
        RdmBody::Query(rdm::Query { scope, view })
    } else {
        RdmBody::Empty
    };
    Ok(Message::new(
        Header {
            query_language: get("ql").map(str::to_owned),
            csid,
            ..Header::new(rdm_type)
        },
        body,
    ))
}

fn host(headers: &HeaderMap) -> Option<String> {
    headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_owned)
}

async fn by_post(State(node): State<Arc<Node>>, req: Request) -> Response {
    let remote = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip());
    let host = host(req.headers());
    let content_type = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let media = content_type.split(';').next().unwrap_or("").trim();
    if !media.eq_ignore_ascii_case(rdm::CONTENT_TYPE) {
        let f = fail(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!(
                "expected Content-Type {}, got {content_type:?}",
                rdm::CONTENT_TYPE
            ),
        );
        return failure(&node, &f);
    }
    let config = node.config();
    let max = config.rdm.max_request_bytes;
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok());
    let deadline = tokio::time::Instant::now() + config.limits.http_timeout;
    let read = crate::front::body::read(
        req.into_body(),
        declared,
        max,
        Some(node.inflight()),
        deadline,
    )
    .await;
    let (bytes, _reservation) = match read {
        Ok(b) => b,
        Err(crate::front::body::BodyError::TooLarge { .. }) => {
            let f = fail(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the request is larger than {max} bytes (rdm.max_request_bytes)"),
            );
            return failure(&node, &f);
        }
        Err(e @ crate::front::body::BodyError::Budget(_)) => {
            let f = fail(StatusCode::SERVICE_UNAVAILABLE, e.to_string());
            return failure(&node, &f);
        }
        Err(e) => return failure(&node, &fail(StatusCode::BAD_REQUEST, e.to_string())),
    };
    let limits = crate::model::config::soif_limits(&node.config());
    match Message::parse(bytes, limits) {
        Ok(msg) => answer(node, msg, remote, host).await,
        Err(e) => failure(
            &node,
            &fail(StatusCode::BAD_REQUEST, format!("not an RDM message: {e}")),
        ),
    }
}

/// The CSID naming `name` on this server.
fn csid_of(host: &str, name: &str) -> String {
    format!("x-catalog://{host}/{name}")
}

fn server_host(node: &Node, host: Option<&str>) -> String {
    host.map(str::to_owned)
        .or_else(|| {
            node.identity()
                .base_uris
                .first()
                .and_then(|u| u.split("://").nth(1))
                .map(|r| r.split('/').next().unwrap_or(r).to_owned())
        })
        .unwrap_or_else(|| "localhost".to_owned())
}

/// The catalog a request names (by CSID name), or the default one.
fn catalog<'a>(config: &'a Config, csid: Option<&Csid>) -> Result<&'a CollectionConfig, Failure> {
    let name = match csid {
        Some(c) => Some(c.name.as_str()),
        None => config.rdm.default_catalog.as_deref(),
    };
    match name {
        Some(n) => config
            .collections
            .iter()
            .find(|c| c.name == n)
            .ok_or_else(|| {
                fail(
                    StatusCode::NOT_FOUND,
                    format!("no catalog {n:?} here (see the server description)"),
                )
            }),
        None => config
            .collections
            .first()
            .ok_or_else(|| fail(StatusCode::NOT_FOUND, "this server has no catalogs")),
    }
}

fn query_of(msg: &Message) -> rdm::Query {
    match &msg.body {
        RdmBody::Query(q) => q.clone(),
        _ => rdm::Query::default(),
    }
}

/// Answers one request.
pub async fn answer(
    node: Arc<Node>,
    msg: Message,
    remote: Option<IpAddr>,
    host: Option<String>,
) -> Response {
    let ty = msg.header.rdm_type;
    let result = match ty {
        RdmType::StatusRequest => Ok(status_response(
            &node,
            StatusCode::OK,
            None,
            &format!(
                "cipd {} serves {} catalog(s); up {}s.",
                env!("CARGO_PKG_VERSION"),
                node.config().collections.len(),
                node.uptime().as_secs()
            ),
        )),
        RdmType::ServerDescriptionRequest => server_description(&node, host.as_deref()).await,
        RdmType::SchemaDescriptionRequest => schema(&node, &msg).await,
        RdmType::TaxonomyDescriptionRequest => taxonomy(&node, &msg).await,
        RdmType::RdRequest | RdmType::RdRequestDeleted => rd_request(&node, &msg).await,
        RdmType::RdResponse | RdmType::RdResponseDeleted => submit(&node, msg, remote).await,
        other => Err(fail(
            StatusCode::NOT_IMPLEMENTED,
            format!("{other} is not accepted here"),
        )),
    };
    result.unwrap_or_else(|f| failure(&node, &f))
}

fn need_ql(msg: &Message, expected: &[&str]) -> Result<String, Failure> {
    let ql = msg.header.query_language.as_deref().ok_or_else(|| {
        fail(
            StatusCode::BAD_REQUEST,
            format!("{} needs an RDM-Query-Language", msg.header.rdm_type),
        )
    })?;
    expected
        .iter()
        .find(|e| e.eq_ignore_ascii_case(ql))
        .map(|e| (*e).to_owned())
        .ok_or_else(|| {
            // The client asked in a language this server does not offer (its server
            // description lists those it does): the client's error.
            fail(
                StatusCode::BAD_REQUEST,
                format!(
                    "query language {ql:?} is not supported for {}; use {}",
                    msg.header.rdm_type,
                    expected.join(" or ")
                ),
            )
        })
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, Failure> {
    crate::sys::net::spawn_blocking(f).await.map_err(|e| {
        fail(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("task failed: {e}"),
        )
    })
}

fn store_of(node: &Node, c: &CollectionConfig) -> Result<Arc<CollectionStore>, Failure> {
    node.local().catalog(&c.name).ok_or_else(|| {
        fail(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("catalog {:?} is not loaded yet", c.name),
        )
    })
}

async fn server_description(node: &Arc<Node>, host: Option<&str>) -> Result<Response, Failure> {
    let config = node.config();
    let host = server_host(node, host);
    let default = catalog(&config, None).ok();
    // Every type this server accepts, submissions included: whether a catalog takes a
    // given submitter's RDs is that catalog's answer (403), not the protocol's.
    let types: Vec<&str> = vec![
        "rd-request",
        "rd-request-deleted",
        "rd-response",
        "rd-response-deleted",
        "schema-description-request",
        "server-description-request",
        "taxonomy-description-request",
        "status-request",
    ];
    let samples = match default {
        Some(c) => {
            let store = store_of(node, c)?;
            blocking(move || {
                (0..store.len().min(3) as u32)
                    .filter_map(|i| store.read(i).ok())
                    .map(|o| Bytes::from(o.to_bytes()))
                    .collect()
            })
            .await?
        }
        None => Vec::new(),
    };
    let now = journal::now();
    let started = now - node.uptime().as_secs() as i64;
    let sd = ServerDescription {
        url: default.map_or_else(|| "-".to_owned(), |c| csid_of(&host, &c.name)),
        supported_types: types.iter().map(|s| (*s).to_owned()).collect(),
        supported_query_languages: QUERY_LANGUAGES.iter().map(|s| (*s).to_owned()).collect(),
        last_modified: Some(date::format(started)),
        expires: Some(date::format(now + config.rdm.expires.as_secs() as i64)),
        description: Some(config.rdm.description.clone().unwrap_or_else(|| {
            format!(
                "cipd node {}: {}",
                node.identity().dsi,
                node.identity()
                    .description
                    .clone()
                    .unwrap_or_else(|| "a CIP referral mesh node".to_owned())
            )
        })),
        catalogs: config
            .collections
            .iter()
            .map(|c| csid_of(&host, &c.name))
            .collect(),
        maintainer: config.rdm.maintainer.clone(),
        samples,
    };
    let msg = Message::new(
        Header::new(RdmType::ServerDescriptionResponse),
        RdmBody::Objects(vec![sd.to_object()]),
    );
    Ok(whole(node, StatusCode::OK, &msg))
}

/// The SOIF objects of an operator's file (a schema or taxonomy); problems are 500s that
/// name the file.
fn read_soif_file(path: &std::path::Path) -> Result<Vec<SoifObject>, Failure> {
    let broken = |e: &dyn std::fmt::Display| {
        fail(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("{}: {e}", path.display()),
        )
    };
    let bytes = std::fs::read(path).map_err(|e| broken(&e))?;
    cip_proto::soif::parse_all(bytes, Limits::default()).map_err(|e| broken(&e))
}

/// The schema of a catalog: its `schema` file, or one generated from its RDs.
fn catalog_schema(
    config: &Config,
    c: &CollectionConfig,
    store: &CollectionStore,
) -> Result<Schema, Failure> {
    if let Some(path) = &c.catalog.schema {
        let objs = read_soif_file(path)?;
        let o = objs
            .iter()
            .find(|o| o.template().as_str().eq_ignore_ascii_case("SCHEMA"))
            .ok_or_else(|| {
                fail(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("{} holds no @SCHEMA", path.display()),
                )
            })?;
        return Schema::from_object(o)
            .map_err(|e| fail(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()));
    }
    generated_schema(config, store).map_err(|e| fail(StatusCode::INTERNAL_SERVER_ERROR, e))
}

/// A schema from what the catalog's RDs hold: one entry per attribute (multi-value
/// suffixes folded), `Data-Type` `blob` when a value is not text, exported attributes with
/// `Index-Attribute` in export order, `Schema-Name` the most common template.
pub fn generated_schema(config: &Config, store: &CollectionStore) -> Result<Schema, String> {
    let mut order: Vec<String> = Vec::new();
    let mut binary: std::collections::HashSet<String> = Default::default();
    let mut templates: std::collections::HashMap<String, usize> = Default::default();
    store
        .scan(&mut |_, o| {
            *templates
                .entry(o.template().as_str().to_owned())
                .or_default() += 1;
            for a in &o.attributes {
                let base = a.name.base_name();
                if !order.iter().any(|x| x.eq_ignore_ascii_case(base)) {
                    order.push(base.to_owned());
                }
                if !cip_proto::soif::is_text(&a.value) {
                    binary.insert(base.to_ascii_lowercase());
                }
            }
        })
        .map_err(|e| e.to_string())?;
    let name = templates
        .into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
        .map(|(t, _)| t);
    let entries = order
        .iter()
        .map(|attr| {
            let mut e = SchemaEntry::new(attr);
            let blob = binary.contains(&attr.to_ascii_lowercase());
            e.set("Data-Type", if blob { "blob" } else { "varchar" });
            e.set(
                "Content-Type",
                if blob {
                    "application/octet-stream"
                } else {
                    "text/plain"
                },
            );
            if let Some(i) = config
                .export
                .attributes
                .iter()
                .position(|s| s.attribute.eq_ignore_ascii_case(attr))
            {
                e.set("Index-Attribute", (i + 1).to_string());
            }
            e
        })
        .collect();
    Ok(Schema {
        url: "-".into(),
        language_version: "1.0".into(),
        name,
        last_modified: Some(date::format(journal::now())),
        maintainer: config.rdm.maintainer.clone(),
        entries,
    })
}

async fn schema(node: &Arc<Node>, msg: &Message) -> Result<Response, Failure> {
    need_ql(msg, &["schema-basic"])?;
    let config = node.config();
    let c = catalog(&config, msg.header.csid.as_ref())?.clone();
    let q = query_of(msg);
    let scope = SchemaScope::parse(q.scope.as_deref().unwrap_or("defined SOIF-Attribute"))
        .map_err(|e| fail(StatusCode::BAD_REQUEST, e.to_string()))?;
    let store = store_of(node, &c)?;
    let mut schema = blocking(move || catalog_schema(&config, &c, &store)).await??;
    schema
        .entries
        .retain(|e| SchemaScope::holds(e.get(&scope.defined)));
    if let Some(keep) = &q.view.attributes {
        for e in &mut schema.entries {
            e.properties
                .retain(|(n, _)| keep.iter().any(|k| k.eq_ignore_ascii_case(n)));
        }
    }
    if let Some(h) = q.view.hits {
        schema.entries.truncate(h);
    }
    let msg = Message::new(
        Header::new(RdmType::SchemaDescriptionResponse),
        RdmBody::Objects(vec![schema.to_object()]),
    );
    Ok(whole(node, StatusCode::OK, &msg))
}

async fn taxonomy(node: &Arc<Node>, msg: &Message) -> Result<Response, Failure> {
    need_ql(msg, &["taxonomy-basic"])?;
    let config = node.config();
    let c = catalog(&config, msg.header.csid.as_ref())?;
    let q = query_of(msg);
    let scope = TaxonomyScope::parse(q.scope.as_deref().unwrap_or("descendant ROOT"))
        .map_err(|e| fail(StatusCode::BAD_REQUEST, e.to_string()))?;
    let t = match c.catalog.taxonomy.clone() {
        Some(path) => {
            blocking(move || -> Result<Taxonomy, Failure> {
                Taxonomy::from_objects(&read_soif_file(&path)?).map_err(|e| {
                    fail(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        format!("{}: {e}", path.display()),
                    )
                })
            })
            .await??
        }
        // The server description offers taxonomy-basic for every catalog: one without a
        // taxonomy answers an empty one (ROOT and nothing under it), not 404.
        None => Taxonomy {
            id: c.name.clone(),
            description: Some(format!("catalog {:?} has no classifications", c.name)),
            classifications: Vec::new(),
        },
    };
    let picked = t
        .subtree(&scope.classification, scope.depth)
        .ok_or_else(|| {
            fail(
                StatusCode::NOT_FOUND,
                format!("no classification {:?}", scope.classification),
            )
        })?;
    let mut objects = vec![t.header_object()];
    objects.extend(picked.into_iter().map(|c| t.classification_object(c)));
    if let Some(h) = q.view.hits {
        objects.truncate(h + 1);
    }
    let msg = Message::new(
        Header::new(RdmType::TaxonomyDescriptionResponse),
        RdmBody::Objects(objects),
    );
    Ok(whole(node, StatusCode::OK, &msg))
}

/// A body fed through a channel by a blocking producer; its size is exact when known.
struct ChannelBody {
    rx: mpsc::Receiver<io::Result<Bytes>>,
    length: Option<u64>,
}

impl HttpBody for ChannelBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, io::Error>>> {
        self.rx
            .poll_recv(cx)
            .map(|o| o.map(|r| r.map(hyper::body::Frame::data)))
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        match self.length {
            Some(n) => hyper::body::SizeHint::with_exact(n),
            None => hyper::body::SizeHint::default(),
        }
    }
}

/// Writes into the channel in chunks of about 64 KiB; an `Err` once the client is gone.
struct Chunker {
    tx: mpsc::Sender<io::Result<Bytes>>,
    buf: Vec<u8>,
}

impl Chunker {
    fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.buf.extend_from_slice(bytes);
        if self.buf.len() >= 64 << 10 {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::take(&mut self.buf));
        self.tx
            .blocking_send(Ok(chunk))
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "client gone"))
    }
}

/// Streams `header` then whatever `produce` writes, from the blocking pool.
fn stream(
    node: &Node,
    length: Option<u64>,
    header: Vec<u8>,
    produce: impl FnOnce(&mut Chunker) -> io::Result<()> + Send + 'static,
) -> Response {
    let (tx, rx) = mpsc::channel(8);
    crate::sys::net::spawn_blocking(move || {
        let mut c = Chunker {
            tx: tx.clone(),
            buf: header,
        };
        let r = produce(&mut c).and_then(|()| c.flush());
        if let Err(e) = r
            && e.kind() != io::ErrorKind::BrokenPipe
        {
            tracing::warn!(error = %e, "rdm answer cut short");
            let _ = tx.blocking_send(Err(e));
        }
    });
    respond(node, StatusCode::OK, Body::new(ChannelBody { rx, length }))
}

fn rd_response_header() -> Vec<u8> {
    Header::new(RdmType::RdResponse).to_object().to_bytes()
}

async fn rd_request(node: &Arc<Node>, msg: &Message) -> Result<Response, Failure> {
    let ql = need_ql(msg, &["gatherer", "cip-query", "cip-referral"])?;
    let deleted = msg.header.rdm_type == RdmType::RdRequestDeleted;
    if deleted && ql != "gatherer" {
        return Err(fail(
            StatusCode::BAD_REQUEST,
            "rd-request-deleted is answered in the gatherer language only",
        ));
    }
    let config = node.config();
    let q = query_of(msg);
    match ql.as_str() {
        "cip-referral" => return referral_objects(node, &q).await,
        "cip-query" => return query_objects(node, msg, &q).await,
        _ => {}
    }
    let c = catalog(&config, msg.header.csid.as_ref())?.clone();
    let scope = GathererScope::parse(q.scope.as_deref().unwrap_or("all"))
        .map_err(|e| fail(StatusCode::BAD_REQUEST, e.to_string()))?;
    let store = store_of(node, &c)?;
    let view = q.view.clone();
    let needs_journal = deleted || matches!(scope, GathererScope::Since(_));
    let journal = if needs_journal {
        let (n, dir, name, s) = (
            node.clone(),
            config.data_dir.clone(),
            c.name.clone(),
            store.clone(),
        );
        Some(
            blocking(move || n.rdm_journals().sync(&dir, &name, &s, journal::now()))
                .await?
                .map_err(|e| fail(StatusCode::INTERNAL_SERVER_ERROR, e))?,
        )
    } else {
        None
    };
    if deleted {
        // Read just above for deletions.
        let Some(j) = journal else {
            return Err(fail(
                StatusCode::INTERNAL_SERVER_ERROR,
                "no journal for a deletions request",
            ));
        };
        let since = match scope {
            GathererScope::All => None,
            GathererScope::Since(t) => Some(t),
        };
        let mut rds: Vec<SoifObject> = j
            .deleted_since(since)
            .into_iter()
            .filter_map(|(t, u)| SoifObject::new(t, u.as_bytes().to_vec()).ok())
            .collect();
        view.apply(&mut rds);
        let msg = Message::new(Header::new(RdmType::RdResponse), RdmBody::Objects(rds));
        return Ok(whole(node, StatusCode::OK, &msg));
    }
    let header = rd_response_header();
    if scope == GathererScope::All && view.is_empty() {
        let length = header.len() as u64 + store.bytes();
        return Ok(stream(node, Some(length), header, move |c| {
            store.copy_raw(&mut |b| c.put(b))
        }));
    }
    let wanted: Option<std::collections::HashSet<String>> = match (scope, &journal) {
        (GathererScope::Since(t), Some(j)) => {
            Some(j.changed_since(t).into_iter().map(str::to_owned).collect())
        }
        _ => None,
    };
    if !view.order.is_empty() {
        let max = config.rdm.max_ordered;
        let rds = blocking(move || -> Result<Vec<SoifObject>, Failure> {
            let mut rds = Vec::new();
            let mut over = false;
            store
                .scan(&mut |_, o| {
                    if over || !wanted.as_ref().is_none_or(|w| w.contains(&*String::from_utf8_lossy(o.url()))) {
                        return;
                    }
                    if rds.len() == max {
                        over = true;
                        return;
                    }
                    rds.push(o);
                })
                .map_err(|e| fail(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
            if over {
                return Err(fail(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("an ordered view sorts at most {max} RDs (rdm.max_ordered); narrow the scope or drop View-Order"),
                ));
            }
            let mut rds = rds;
            view.apply(&mut rds);
            Ok(rds)
        })
        .await??;
        let msg = Message::new(Header::new(RdmType::RdResponse), RdmBody::Objects(rds));
        return Ok(whole(node, StatusCode::OK, &msg));
    }
    // The RDs of a view or scope, written to any sink: run once to count the bytes (an
    // HTTP/1.0 reader needs Content-Length to tell a cut answer from a whole one; the store
    // is a snapshot, so both runs write the same), then to send them.
    let write = move |sink: &mut dyn FnMut(&[u8]) -> io::Result<()>| -> io::Result<()> {
        let mut sent = 0usize;
        let mut result = Ok(());
        let scanned = store.scan(&mut |_, mut o| {
            if result.is_err() || view.hits.is_some_and(|h| sent >= h) {
                return;
            }
            if let Some(w) = &wanted
                && !w.contains(&*String::from_utf8_lossy(o.url()))
            {
                return;
            }
            view.project(&mut o);
            sent += 1;
            result = sink(b"\n").and_then(|()| sink(&o.to_bytes()));
        });
        result?;
        scanned.map_err(|e| io::Error::other(e.to_string()))
    };
    let head = header.len() as u64;
    let (length, write) = blocking(move || {
        let mut n = head;
        write(&mut |b| {
            n += b.len() as u64;
            Ok(())
        })
        .map(|()| (n, write))
    })
    .await?
    .map_err(|e| fail(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    Ok(stream(node, Some(length), header, move |c| {
        write(&mut |b| c.put(b))
    }))
}

/// `cip-query`: the catalog's RDs matching a query in the project's syntax.
async fn query_objects(
    node: &Arc<Node>,
    msg: &Message,
    q: &rdm::Query,
) -> Result<Response, Failure> {
    let config = node.config();
    let c = catalog(&config, msg.header.csid.as_ref())?.clone();
    let text = q
        .scope
        .clone()
        .ok_or_else(|| fail(StatusCode::BAD_REQUEST, "cip-query needs a Scope (a query)"))?;
    let query = node
        .parse_query(&text)
        .map_err(|e| fail(StatusCode::BAD_REQUEST, e.to_string()))?;
    let store = store_of(node, &c)?;
    let want = q
        .view
        .hits
        .unwrap_or(config.limits.max_objects)
        .min(config.limits.max_objects);
    let scan_max = config.limits.local_scan_max_objects;
    let view = q.view.clone();
    let mut rds = blocking(move || crate::store::local::query([&*store], &query, want, scan_max))
        .await?
        .map_err(|e| fail(StatusCode::BAD_REQUEST, e.to_string()))?
        .objects;
    view.apply(&mut rds);
    let msg = Message::new(Header::new(RdmType::RdResponse), RdmBody::Objects(rds));
    Ok(whole(node, StatusCode::OK, &msg))
}

/// `cip-referral`: the node's referrals for a query, as `@REFERRAL` objects (URL: the first
/// base-uri; `DSI`, `Base-URI-N`, `DSI-Description`, `Count`, `Total`, `Definite`,
/// `Value-N` with `Value-Count-N`).
async fn referral_objects(node: &Arc<Node>, q: &rdm::Query) -> Result<Response, Failure> {
    let text = q.scope.clone().ok_or_else(|| {
        fail(
            StatusCode::BAD_REQUEST,
            "cip-referral needs a Scope (a query)",
        )
    })?;
    let (n, hits) = (node.clone(), q.view.hits);
    let answer = blocking(move || n.referrals(&text, false, hits))
        .await?
        .map_err(|e| fail(StatusCode::BAD_REQUEST, e.to_string()))?;
    let mut rds = Vec::new();
    for r in &answer.referrals {
        let url = r.base_uri.first().map_or("-", String::as_str);
        let Ok(mut o) = SoifObject::new("REFERRAL", url.as_bytes().to_vec()) else {
            continue;
        };
        let mut push = |k: &str, v: String| {
            let _ = o.push(k, v.into_bytes());
        };
        push("DSI", r.dsi.clone());
        for (i, b) in r.base_uri.iter().enumerate() {
            push(&format!("Base-URI-{}", i + 1), b.clone());
        }
        if let Some(d) = &r.dsi_description {
            push("DSI-Description", d.clone());
        }
        push("Count", r.count.to_string());
        push("Total", r.total.to_string());
        push("Definite", u8::from(r.definite).to_string());
        for (i, (v, c)) in r.values.iter().enumerate() {
            push(&format!("Value-{}", i + 1), v.clone());
            push(&format!("Value-Count-{}", i + 1), c.to_string());
        }
        rds.push(o);
    }
    let mut view = q.view.clone();
    view.hits = None;
    view.apply(&mut rds);
    let msg = Message::new(Header::new(RdmType::RdResponse), RdmBody::Objects(rds));
    Ok(whole(node, StatusCode::OK, &msg))
}

/// `rd-response` / `rd-response-deleted` submitted to a writable catalog.
async fn submit(
    node: &Arc<Node>,
    msg: Message,
    remote: Option<IpAddr>,
) -> Result<Response, Failure> {
    let config = node.config();
    let c = catalog(&config, msg.header.csid.as_ref())?.clone();
    if !matches!(c.source, SourceConfig::Rdm { writable: true, .. }) {
        return Err(fail(
            StatusCode::FORBIDDEN,
            format!("catalog {:?} does not accept submissions", c.name),
        ));
    }
    let allowed = remote.is_some_and(|ip| config.rdm.submitters.contains(&ip));
    if !allowed {
        return Err(fail(
            StatusCode::FORBIDDEN,
            format!(
                "{} is not an RDM submitter here (rdm.submitters)",
                remote.map_or_else(|| "this client".to_owned(), |ip| ip.to_string())
            ),
        ));
    }
    let rds: Vec<SoifObject> = match msg.body {
        RdmBody::Objects(o) => o
            .into_iter()
            // An optional schema description may lead the stream.
            .filter(|o| !o.template().as_str().eq_ignore_ascii_case("SCHEMA"))
            .collect(),
        _ => Vec::new(),
    };
    let deleting = msg.header.rdm_type == RdmType::RdResponseDeleted;
    let (copy, _) = crate::pipeline::rdm_pull::copy_paths(&config.data_dir, &c.name);
    let limits = crate::model::config::soif_limits(&config);
    let received = rds.len();
    let applied = blocking(move || {
        if deleting {
            let urls: Vec<String> = rds
                .iter()
                .map(|o| String::from_utf8_lossy(o.url()).into_owned())
                .collect();
            crate::pipeline::rdm_pull::apply(&copy, Vec::new(), &urls, false, limits)
        } else {
            crate::pipeline::rdm_pull::apply(&copy, rds, &[], false, limits)
        }
    })
    .await?
    .map_err(|e| fail(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    if applied.any() {
        node.rebuild_local(false).await;
    }
    tracing::info!(catalog = %c.name, received, added = applied.added, changed = applied.changed, deleted = applied.deleted, "rdm submission");
    Ok(status_response(
        node,
        StatusCode::OK,
        None,
        &format!(
            "{received} RDs received: {} added, {} changed, {} deleted.",
            applied.added, applied.changed, applied.deleted
        ),
    ))
}
