//! Whois++ (RFC 1835) on a CIP port: queries answered with this node's own records and with
//! `# SERVER-TO-ASK` referrals (RFC 1913) to the datasets the routing table holds, in the
//! form ROADS v2.3's clients parse (`WPPC.pm`, `MeshTraversal.pm`).
//!
//! Like ROADS' `wppd`, one port speaks both protocols: the daemon serves it with
//! [`crate::transport::serve_shared_connection`], so a connection whose first line is
//! `# CIP-Version: 3` is CIP (a ROADS gatherer polling us) and anything else is a Whois++
//! query handed to [`WhoisService`].
//!
//! The query line is parsed by [`cip_proto::whoispp`] (grammar there).
//!
//! Matching (PROTOCOL.md, "Whois++ front-end"): attribute names compare ignoring case on
//! their base name (`Author-2` is `Author`); `search=exact` (the default) matches a value
//! equal to the term or holding it as a word, `substring` anywhere, `lstring` a word that
//! starts with it; case is ignored. A term without a name matches any attribute. `not`
//! applies to a single term and filters records only: a referral is a dataset that may hold
//! matches, so negations never remove one.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use cip_proto::soif::SoifObject;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::timeout;
use tokio_util::sync::CancellationToken;

use cip_proto::whoispp::{
    Conjunction, Format, HANDLE_ATTRIBUTE, Search, TEMPLATE_ATTRIBUTE, Term, WhoisQuery, parse,
};

use crate::model::answer::ReferralJson;
use crate::node::Node;
use crate::pipeline::tagged::{stable_tag, words};
use crate::transport::{OtherProtocol, PeerContext, Phase, TransportError};

/// Most routing-table queries one Whois++ query may cost (a bare value is looked up under
/// every attribute that holds it).
const MAX_TABLE_QUERIES: usize = 64;

/// Longest line of an answer before `+` continuation lines (as ROADS' `wppd` wraps).
const WRAP_AT: usize = 75;

/// True when `value` matches `term`'s value under its search.
fn value_matches(value: &str, term: &Term) -> bool {
    let (v, t) = (value.to_lowercase(), term.value.to_lowercase());
    let value_words = || words(&v);
    match term.search {
        Search::Substring => v.contains(&t),
        Search::Exact => v.trim() == t || value_words().any(|w| w == t),
        Search::Prefix => value_words().any(|w| w.starts_with(&t)),
    }
}

/// The handle a record is known by: the same stable tag the tagged index gives it.
pub fn handle_of(o: &SoifObject) -> String {
    stable_tag(o.template().as_str(), o.url()).to_string()
}

fn term_matches(o: &SoifObject, term: &Term) -> bool {
    match term.attribute.as_deref() {
        Some(TEMPLATE_ATTRIBUTE) => o.template().as_str().eq_ignore_ascii_case(&term.value),
        Some(HANDLE_ATTRIBUTE) => handle_of(o) == term.value,
        Some(name) => o.attributes.iter().any(|a| {
            a.name.base_name().eq_ignore_ascii_case(name)
                && value_matches(&String::from_utf8_lossy(&a.value), term)
        }),
        None => o
            .attributes
            .iter()
            .any(|a| value_matches(&String::from_utf8_lossy(&a.value), term)),
    }
}

/// True when record `o` matches conjunction `c`.
pub fn record_matches(o: &SoifObject, c: &Conjunction) -> bool {
    c.template
        .as_deref()
        .is_none_or(|t| o.template().as_str().eq_ignore_ascii_case(t))
        && c.handle.as_deref().is_none_or(|h| handle_of(o) == h)
        && c.terms.iter().all(|t| term_matches(o, t))
        && !c.excluded.iter().any(|t| term_matches(o, t))
}

/// A referral as Whois++ clients follow it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerToAsk {
    /// The dataset's DSI, as server handle.
    pub handle: String,
    /// Whois++ host.
    pub host: String,
    /// Whois++ port.
    pub port: u16,
    /// The base URI it came from.
    pub uri: String,
}

/// The Whois++ address among a dataset's base URIs: `whoispp://host[:port]/` (port 63 when
/// absent, RFC 1835's) or `whois://host[:port]/`.
pub fn whois_address(dsi: &str, base_uris: &[String]) -> Option<ServerToAsk> {
    base_uris.iter().find_map(|u| {
        let lower = u.to_ascii_lowercase();
        let rest = ["whoispp://", "whois++://", "whois://"]
            .iter()
            .find_map(|s| lower.starts_with(s).then(|| &u[s.len()..]))?;
        let authority = rest.split('/').next()?;
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(']') || h.starts_with('[') => match p.parse() {
                Ok(p) => (h, p),
                Err(_) => return None,
            },
            _ => (authority, 63),
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        (!host.is_empty()).then(|| ServerToAsk {
            handle: dsi.to_owned(),
            host: host.to_owned(),
            port,
            uri: u.clone(),
        })
    })
}

/// What one query found.
#[derive(Debug, Default)]
pub struct Found {
    /// Matching local records, at most `maxhits`.
    pub records: Vec<SoifObject>,
    /// All matching local records.
    pub total: u64,
    /// Referrals with a Whois++ address.
    pub referrals: Vec<ServerToAsk>,
    /// Referrals left out for want of a Whois++ address.
    pub unreachable: usize,
}

/// What a query with `chase` found in the mesh.
#[derive(Debug, Default)]
pub struct Chased {
    /// Matching records with the DSI of the node holding each, at most `maxhits`.
    pub records: Vec<(String, SoifObject)>,
    /// All matching records found.
    pub total: u64,
    /// Referrals left unchased that have a Whois++ address.
    pub referrals: Vec<ServerToAsk>,
    /// Some referral was not chased (or failed).
    pub partial: bool,
}

/// Answers Whois++ queries for one node.
#[derive(Debug, Clone)]
pub struct WhoisService {
    node: Arc<Node>,
}

impl WhoisService {
    /// A service over `node`.
    pub fn new(node: Arc<Node>) -> Self {
        Self { node }
    }

    /// Evaluates `q`: local records (on the blocking pool) and referrals.
    ///
    /// # Errors
    /// A message for `% 500` when the local store cannot be read or the query would read
    /// more than `limits.local_scan_max_objects` objects without an indexed attribute.
    pub async fn find(&self, q: &WhoisQuery) -> Result<Found, String> {
        let node = self.node.clone();
        let query = q.clone();
        // A Whois++ search reads the stores: it waits its turn among the scanning queries
        // (`limits.max_concurrent_scans`), as the HTTP API's do.
        let permit = self.node.scan_permit().await;
        let mut found = crate::sys::net::spawn_blocking(move || local_records(&node, &query))
            .await
            .map_err(|e| format!("search failed: {e}"))??;
        drop(permit);
        let own = self.node.identity().dsi.to_string();
        let mut seen = HashSet::new();
        for c in &q.disjuncts {
            if c.handle.is_some() {
                continue;
            }
            for table_query in self.table_queries(c) {
                let Ok(answer) = self.node.referrals(&table_query, false, None) else {
                    continue;
                };
                for r in answer.referrals {
                    if r.dsi == own || !seen.insert(r.dsi.clone()) {
                        continue;
                    }
                    match referral_address(&r) {
                        Some(s) => found.referrals.push(s),
                        None => found.unreachable += 1,
                    }
                }
            }
        }
        Ok(found)
    }

    /// The routing-table queries (`Template:Attribute~value & ...`) that stand for `c`: a
    /// term without attribute is looked up under each attribute name the table holds, at
    /// most [`MAX_TABLE_QUERIES`] queries in all.
    fn table_queries(&self, c: &Conjunction) -> Vec<String> {
        let template = c.template.as_deref().map(|t| format!("{t}:"));
        let mut alternatives: Vec<Vec<String>> = vec![Vec::new()];
        for t in &c.terms {
            let attributes: Vec<String> = match &t.attribute {
                Some(a) => vec![a.clone()],
                None => {
                    let mut names: Vec<String> = self
                        .node
                        .table()
                        .attributes()
                        .into_iter()
                        .map(|a| a.attribute)
                        .collect();
                    names.sort_by_key(|n| n.to_ascii_lowercase());
                    names.dedup_by(|a, b| a.eq_ignore_ascii_case(b));
                    names
                }
            };
            let mut next = Vec::new();
            for prefix in &alternatives {
                for a in &attributes {
                    let mut terms = prefix.clone();
                    terms.push(format!(
                        "{}{a}~{}",
                        template.as_deref().unwrap_or(""),
                        quoted(&t.value)
                    ));
                    next.push(terms);
                    if next.len() >= MAX_TABLE_QUERIES {
                        break;
                    }
                }
            }
            alternatives = next;
        }
        alternatives
            .into_iter()
            .filter(|terms| !terms.is_empty())
            .map(|terms| terms.join(" & "))
            .collect()
    }

    /// With the `chase` constraint: searches the mesh for each conjunction of `q` (one
    /// budget for them all) and keeps the objects that match it by Whois++'s rules, each
    /// with the DSI of the node holding it; referrals left unchased with a Whois++ address
    /// come back as `# SERVER-TO-ASK`.
    ///
    /// # Errors
    /// A message for `% 500` when no conjunction can be searched.
    pub async fn chase(&self, q: &WhoisQuery) -> Result<Chased, String> {
        let mut out = Chased::default();
        let mut budget = self.node.config().search.max_subqueries;
        let mut seen = HashSet::new();
        let mut asked = HashSet::new();
        for c in &q.disjuncts {
            if c.handle.is_some() {
                continue;
            }
            for table_query in self.table_queries(c) {
                if !asked.insert(table_query.clone()) {
                    continue;
                }
                let args = crate::front::search_route::SearchArgs {
                    q: Some(table_query),
                    limit: Some(q.globals.max_hits.to_string()),
                    ..Default::default()
                };
                let (mut req, key) =
                    crate::front::search_route::request_of(&self.node, &args, &Default::default())
                        .map_err(|e| e.message)?;
                req.budget = budget;
                let key = format!("{key}\u{1f}{budget}");
                let (answer, _) = self.node.search(req, key).await;
                budget = budget.saturating_sub(answer.subqueries);
                out.partial |= answer.partial;
                for o in answer.objects {
                    let Ok(mut soif) = SoifObject::new(&o.template, o.url.clone().into_bytes())
                    else {
                        continue;
                    };
                    for (n, v) in &o.attributes {
                        let _ = soif.push(n, v.clone().into_bytes());
                    }
                    if record_matches(&soif, c) && seen.insert((o.holder.clone(), o.url.clone())) {
                        out.total += 1;
                        if out.records.len() < q.globals.max_hits {
                            out.records.push((o.holder, soif));
                        }
                    }
                }
                for u in answer.unchased {
                    if let Some(s) = whois_address(&u.dsi, &u.base_uri)
                        && !out
                            .referrals
                            .iter()
                            .any(|r: &ServerToAsk| r.handle == s.handle)
                    {
                        out.referrals.push(s);
                    }
                }
            }
        }
        Ok(out)
    }

    /// The whole answer to one query line from `remote`, and whether to hold the connection.
    pub async fn answer(&self, line: &str, remote: std::net::IpAddr) -> (String, bool) {
        let mut out = String::new();
        if let Some(text) = self.command(line.trim()) {
            return (text, false);
        }
        let max = self.node.config().limits.max_objects;
        let q = match parse(line, max) {
            Ok(q) => q,
            Err(e) => {
                out.push_str(&format!("% 500 Syntax error: {e}\r\n"));
                return (out, false);
            }
        };
        out.push_str(&format!("% 200 Search is executing: {}\r\n", line.trim()));
        for c in &q.globals.ignored {
            out.push_str(&format!(
                "% 112 Constraint {c:?} not supported; ignored\r\n"
            ));
        }
        if q.globals.chase {
            return self.answer_chased(&q, remote, out).await;
        }
        let found = match self.find(&q).await {
            Ok(f) => f,
            Err(e) => {
                out.push_str(&format!("% 500 {e}\r\n"));
                return (out, q.globals.hold);
            }
        };
        if found.total > q.globals.max_hits as u64 {
            out.push_str("% 110 Too many hits\r\n");
        }
        let server = self.node.identity().dsi.to_string();
        let format = if found.records.len() > q.globals.max_full {
            Format::Summary
        } else {
            q.globals.format
        };
        write_records(&mut out, &server, &found, format);
        write_referrals(&mut out, &found.referrals);
        if found.unreachable > 0 {
            tracing::debug!(
                left_out = found.unreachable,
                "referrals without a whois++ address left out"
            );
        }
        end(out, q.globals.hold)
    }

    /// The rest of the answer to a query with `chase`, after `out`'s first lines.
    async fn answer_chased(
        &self,
        q: &WhoisQuery,
        remote: std::net::IpAddr,
        mut out: String,
    ) -> (String, bool) {
        if let Err(why) = self.node.search_admits(remote) {
            let text = match why {
                crate::node::search_host::SearchRefusal::Disabled => {
                    "this server does not search the mesh"
                }
                crate::node::search_host::SearchRefusal::Denied => {
                    "searching the mesh through this server is not allowed from here"
                }
                crate::node::search_host::SearchRefusal::RateLimited => {
                    "too many searches from this address; try again shortly"
                }
            };
            out.push_str(&format!("% 500 chase refused: {text}\r\n"));
            return (out, q.globals.hold);
        }
        let chased = match self.chase(q).await {
            Ok(c) => c,
            Err(e) => {
                out.push_str(&format!("% 500 {e}\r\n"));
                return (out, q.globals.hold);
            }
        };
        if chased.partial {
            out.push_str("% 111 Partial answer: some servers were not reached (they follow as SERVER-TO-ASK where they speak Whois++)\r\n");
        }
        if chased.total > q.globals.max_hits as u64 {
            out.push_str("% 110 Too many hits\r\n");
        }
        for (holder, o) in &chased.records {
            let found = Found {
                records: vec![o.clone()],
                total: 1,
                ..Found::default()
            };
            write_records(&mut out, holder, &found, q.globals.format);
        }
        write_referrals(&mut out, &chased.referrals);
        end(out, q.globals.hold)
    }

    /// The answer to a system command (RFC 1835 §3.3), when `line` is one.
    fn command(&self, line: &str) -> Option<String> {
        let version = env!("CARGO_PKG_VERSION");
        let text = match line.to_ascii_lowercase().as_str() {
            "version" => format!(
                "% 200 Command okay\r\n# FULL VERSION {dsi} VERSION\r\n Version: 1.0\r\n Program-Name: cipd\r\n Program-Version: {version}\r\n# END\r\n\r\n% 226 Transaction complete\r\n",
                dsi = self.node.identity().dsi
            ),
            "commands" => "% 200 Command okay\r\n# FULL COMMANDS - COMMANDS\r\n Commands: commands describe help version <query>\r\n# END\r\n\r\n% 226 Transaction complete\r\n".to_owned(),
            "help" => "% 200 Command okay\r\n% 113-Queries: attribute=value, template=name, handle=h, a bare value;\r\n% 113-combined with and, or, not and parentheses; constraints after the last\r\n% 113-colon: format=full|abridged|handle|summary, maxhits=N, search=exact|substring|lstring, hold,\r\n% 113 chase (this server follows the referrals and answers with the whole mesh's records)\r\n% 226 Transaction complete\r\n".to_owned(),
            "describe" => {
                let identity = self.node.identity();
                format!(
                    "% 200 Command okay\r\n# FULL SERVICES {dsi} DESCRIBE\r\n Text: {}\r\n Server-Handle: {dsi}\r\n# END\r\n\r\n% 226 Transaction complete\r\n",
                    identity
                        .description
                        .clone()
                        .unwrap_or_else(|| "cipd CIP index server".into()),
                    dsi = identity.dsi
                )
            }
            _ => return None,
        };
        Some(text)
    }
}

fn referral_address(r: &ReferralJson) -> Option<ServerToAsk> {
    whois_address(&r.dsi, &r.base_uri)
}

/// A value in the routing query language: quoted, with `"` and `\` escaped.
fn quoted(v: &str) -> String {
    let mut out = String::with_capacity(v.len() + 2);
    out.push('"');
    for c in v.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

/// The local records matching any conjunction of `q`, each once, in store order.
fn local_records(node: &Node, q: &WhoisQuery) -> Result<Found, String> {
    let local = node.local();
    let scan_max = node.config().limits.local_scan_max_objects as u64;
    if local.len() > scan_max {
        return Err(format!(
            "this server holds {} records, more than limits.local_scan_max_objects ({scan_max}) \
             a Whois++ query may read",
            local.len()
        ));
    }
    let mut found = Found::default();
    let mut seen = HashSet::new();
    for store in local.stores() {
        store
            .scan(&mut |_, o| {
                if q.disjuncts.iter().any(|c| record_matches(&o, c)) && seen.insert(handle_of(&o)) {
                    found.total += 1;
                    if found.records.len() < q.globals.max_hits {
                        found.records.push(o);
                    }
                }
            })
            .map_err(|e| format!("the local store cannot be read: {e}"))?;
    }
    Ok(found)
}

/// Appends a `# SERVER-TO-ASK` block for each referral (RFC 1913).
fn write_referrals(out: &mut String, referrals: &[ServerToAsk]) {
    for s in referrals {
        out.push_str(&format!(
            "# SERVER-TO-ASK {h}\r\n Server-Handle: {h}\r\n Host-Name: {}\r\n Host-Port: {}\r\n URI: {}\r\n# END\r\n\r\n",
            s.host,
            s.port,
            s.uri,
            h = s.handle
        ));
    }
}

/// Ends an answer with `% 226`, saying so when the connection is held; returns it with
/// `hold`.
fn end(mut out: String, hold: bool) -> (String, bool) {
    out.push_str(if hold {
        "% 226 Transaction complete; holding the connection open\r\n"
    } else {
        "% 226 Transaction complete\r\n"
    });
    (out, hold)
}

/// Appends the records in `format`.
fn write_records(out: &mut String, server: &str, found: &Found, format: Format) {
    match format {
        Format::ServerToAsk => {}
        Format::Summary => {
            if found.total > 0 {
                let mut templates: Vec<&str> = found
                    .records
                    .iter()
                    .map(|o| o.template().as_str())
                    .collect();
                templates.sort_unstable();
                templates.dedup();
                out.push_str(&format!(
                    "# SUMMARY {server}\r\n Matches: {}\r\n Templates: {}\r\n# END\r\n\r\n",
                    found.total,
                    templates.join(", ")
                ));
            }
        }
        Format::Handle => {
            for o in &found.records {
                out.push_str(&format!(
                    "# HANDLE {} {server} {}\r\n",
                    o.template().as_str(),
                    handle_of(o)
                ));
            }
        }
        Format::Abridged | Format::Full => {
            for o in &found.records {
                let kind = if format == Format::Full {
                    "FULL"
                } else {
                    "ABRIDGED"
                };
                out.push_str(&format!(
                    "# {kind} {} {server} {}\r\n",
                    o.template().as_str(),
                    handle_of(o)
                ));
                if let Some(url) = o.url_str() {
                    attribute_lines(out, "URI", url);
                }
                for a in &o.attributes {
                    let name = a.name.base_name();
                    if format == Format::Abridged && !name.eq_ignore_ascii_case("title") {
                        continue;
                    }
                    attribute_lines(out, name, &String::from_utf8_lossy(&a.value));
                }
                out.push_str("# END\r\n\r\n");
            }
        }
    }
}

/// ` Name: value`, lines of a value after the first as `-` continuations, lines longer
/// than [`WRAP_AT`] continued with `+` (RFC 1835 §3.4; ROADS' client joins `+` lines
/// directly and `-` lines with a space).
fn attribute_lines(out: &mut String, name: &str, value: &str) {
    for (i, line) in value.lines().enumerate() {
        let mut rest = line.trim_end_matches('\r');
        let mut lead = if i == 0 {
            format!(" {name}: ")
        } else {
            "-".to_owned()
        };
        loop {
            let room = WRAP_AT.saturating_sub(lead.len()).max(8);
            let cut = if rest.len() <= room {
                rest.len()
            } else {
                let mut c = room;
                while !rest.is_char_boundary(c) {
                    c -= 1;
                }
                c
            };
            out.push_str(&lead);
            out.push_str(&rest[..cut]);
            out.push_str("\r\n");
            rest = &rest[cut..];
            if rest.is_empty() {
                break;
            }
            lead = "+".to_owned();
        }
    }
}

/// Reads one line (without its line end) into a string, with `idle` as the deadline.
/// `Ok(None)` at end of input or shutdown.
async fn read_line<S: AsyncRead + Unpin>(
    io: &mut S,
    buf: &mut BytesMut,
    max: usize,
    idle: Duration,
    shutdown: &CancellationToken,
) -> Result<Option<String>, TransportError> {
    loop {
        if let Some(i) = memchr::memchr(b'\n', buf) {
            let line = buf.split_to(i + 1);
            let text = String::from_utf8_lossy(&line[..i]);
            return Ok(Some(text.trim_end_matches('\r').to_owned()));
        }
        if buf.len() > max {
            return Err(TransportError::Stream(
                cip_proto::cip::StreamError::LineTooLong { offset: 0, max },
            ));
        }
        buf.reserve(4096);
        let read = tokio::select! {
            () = shutdown.cancelled() => return Ok(None),
            r = timeout(idle, io.read_buf(buf)) => r,
        };
        match read {
            Err(_) => return Err(TransportError::Timeout { phase: Phase::Idle }),
            Ok(Err(e)) => return Err(e.into()),
            Ok(Ok(0)) => return Ok(None),
            Ok(Ok(_)) => {}
        }
    }
}

impl OtherProtocol for WhoisService {
    async fn serve<S>(
        &self,
        first: String,
        mut io: S,
        mut buffered: BytesMut,
        peer: &PeerContext,
        shutdown: CancellationToken,
    ) -> Result<(), TransportError>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send,
    {
        let config = self.node.config();
        let (max_line, idle, write) = (
            config.limits.max_line_length,
            config.limits.idle_timeout,
            config.limits.request_timeout,
        );
        let mut line = first;
        loop {
            tracing::debug!(remote = %peer.remote, query = %line, "whois++ query");
            crate::sys::metrics::Metrics::inc(&self.node.metrics().whoispp_queries);
            let (mut answer, hold) = self.answer(&line, peer.remote.ip()).await;
            if !hold {
                answer.push_str("% 203 Bye\r\n");
            }
            timeout(write, io.write_all(answer.as_bytes()))
                .await
                .map_err(|_| TransportError::Timeout {
                    phase: Phase::Transfer,
                })??;
            if !hold {
                let _ = timeout(write, io.shutdown()).await;
                return Ok(());
            }
            match read_line(&mut io, &mut buffered, max_line, idle, &shutdown).await? {
                Some(next) => line = next,
                None => {
                    let _ = timeout(write, io.write_all(b"% 203 Bye\r\n")).await;
                    return Ok(());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_match_words_by_default() {
        let t = |v: &str, s: Search| Term {
            attribute: None,
            value: v.into(),
            search: s,
        };
        assert!(value_matches(
            "Centroids, indexing",
            &t("indexing", Search::Exact)
        ));
        assert!(!value_matches(
            "Centroids, indexing",
            &t("centroid", Search::Exact)
        ));
        assert!(value_matches(
            "Centroids, indexing",
            &t("centroid", Search::Prefix)
        ));
        assert!(value_matches(
            "Centroids, indexing",
            &t("troids", Search::Substring)
        ));
        assert!(value_matches("Jon KNIGHT", &t("knight", Search::Exact)));
        assert!(value_matches("whois++", &t("whois++", Search::Exact)));
    }

    #[test]
    fn whois_addresses_come_from_base_uris() {
        let a = whois_address(
            "1.2",
            &["http://h/".into(), "whoispp://127.0.0.1:18237/".into()],
        )
        .unwrap();
        assert_eq!((a.host.as_str(), a.port), ("127.0.0.1", 18237));
        assert_eq!(
            whois_address("1.2", &["whois://w.example/".into()])
                .unwrap()
                .port,
            63
        );
        let v6 = whois_address("1.2", &["whoispp://[::1]:4343/".into()]).unwrap();
        assert_eq!((v6.host.as_str(), v6.port), ("::1", 4343));
        assert!(whois_address("1.2", &["http://h:80/".into()]).is_none());
    }

    #[test]
    fn long_and_multi_line_values_continue() {
        let mut out = String::new();
        attribute_lines(
            &mut out,
            "Description",
            &format!("{}\nsecond", "x".repeat(100)),
        );
        let lines: Vec<&str> = out.split("\r\n").collect();
        assert!(lines[0].starts_with(" Description: x"));
        assert!(lines[0].len() <= WRAP_AT);
        assert!(lines[1].starts_with('+'));
        assert_eq!(lines[2], "-second");
    }
}
