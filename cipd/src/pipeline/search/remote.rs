//! Asking another node: a cipd node over HTTP (`/v1/search`, the search chained on with what
//! is left of the budget), a Whois++ server (a ROADS server) with a Whois++ query line.
//!
//! Every request is bounded by time and by the bytes read. The HTTP client given follows no
//! redirect and uses no proxy (a redirect would take a sub-query to a host the target
//! checks never saw).

use std::time::Duration;

use cip_proto::whoispp_answer::{AnswerLimits, WhoisAnswer, parse_answer};
use hints::query::{MatchOp, Query};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::model::answer::SearchAnswer;
use crate::sys::http::{FetchError, FetchLimits, HttpClient};

/// Header: sub-queries the receiving node (and those it asks) may still send.
pub const BUDGET_HEADER: &str = "cip-search-budget";
/// Header: the DSIs the search has asked already, space-separated.
pub const VISITED_HEADER: &str = "cip-search-visited";
/// Header: `down` or `up`, which way the request went ([`super::plan::Hop`]).
pub const DIRECTION_HEADER: &str = "cip-search-direction";
/// Header: hops from the node the client asked, for the trace.
pub const HOP_HEADER: &str = "cip-search-hop";

/// What a sub-request carries.
#[derive(Debug, Clone)]
pub struct SubRequest<'a> {
    /// The query.
    pub query: &'a str,
    /// Most objects wanted.
    pub limit: usize,
    /// Time the receiver has to answer, in milliseconds.
    pub deadline_ms: u64,
    /// Hops it may still go.
    pub depth: u32,
    /// Sub-queries it may send.
    pub budget: u32,
    /// DSIs asked already.
    pub visited: &'a [String],
    /// `down` or `up`.
    pub direction: &'static str,
    /// Its hop count from the entry node.
    pub hop: u32,
    /// Its `traceparent`.
    pub traceparent: String,
}

/// Why a sub-request brought nothing back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubError {
    /// No answer within the time given.
    #[error("no answer within {}", humantime::format_duration(*.0))]
    Timeout(Duration),
    /// It could not be reached (refused, reset, no route, TLS).
    #[error("{0}")]
    Unreachable(String),
    /// It answered with an error status.
    #[error("HTTP {status}: {message}")]
    Status {
        /// The status.
        status: u16,
        /// Its message.
        message: String,
    },
    /// It answered something that is not a search answer.
    #[error("bad answer: {0}")]
    BadAnswer(String),
}

impl SubError {
    /// True when the node itself looks down (cached as a failure); false for answers that
    /// only say "not now" or "not this" (a 4xx, a 503 of an overloaded node) and for
    /// timeouts the search's own deadline cut short.
    pub fn is_failure(&self, allowed: Duration, rto: Duration) -> bool {
        match self {
            Self::Unreachable(_) | Self::BadAnswer(_) => true,
            Self::Timeout(_) => allowed >= rto.max(Duration::from_millis(250)),
            Self::Status { status, .. } => *status >= 500 && *status != 503,
        }
    }
}

/// The `/v1/search` URL under `base` (a base-URI that may hold a path of its own).
pub fn search_url(base: &str) -> String {
    let base = base.split(['?', '#']).next().unwrap_or(base);
    format!("{}/v1/search", base.trim_end_matches('/'))
}

/// Asks the cipd node at `base` (an `http://` or `https://` base-URI).
///
/// # Errors
/// See [`SubError`].
pub async fn ask_http(
    client: &HttpClient,
    base: &str,
    req: &SubRequest<'_>,
    timeout: Duration,
    max_bytes: u64,
) -> Result<SearchAnswer, SubError> {
    let url = format!(
        "{}?q={}&limit={}&deadline={}&depth={}",
        search_url(base),
        crate::model::url::percent_encode(req.query),
        req.limit,
        req.deadline_ms,
        req.depth
    );
    let mut headers = HeaderMap::new();
    let mut put = |name: &'static str, value: String| {
        if let Ok(v) = HeaderValue::from_str(&value) {
            headers.insert(HeaderName::from_static(name), v);
        }
    };
    put(BUDGET_HEADER, req.budget.to_string());
    put(VISITED_HEADER, req.visited.join(" "));
    put(DIRECTION_HEADER, req.direction.to_owned());
    put(HOP_HEADER, req.hop.to_string());
    put(super::trace::HEADER, req.traceparent.clone());
    put("accept", "application/json".to_owned());
    let limits = FetchLimits { timeout, max_bytes };
    let answer = client
        .get_any(&url, headers, limits)
        .await
        .map_err(|e| match e {
            FetchError::Timeout { limit, .. } => SubError::Timeout(limit),
            e => SubError::Unreachable(e.to_string()),
        })?;
    let status = answer.status.as_u16();
    if !(200..300).contains(&status) {
        #[derive(serde::Deserialize)]
        struct ErrorBody {
            message: String,
        }
        let message = serde_json::from_slice::<ErrorBody>(&answer.body)
            .map(|e| e.message)
            .unwrap_or_else(|_| {
                String::from_utf8_lossy(&answer.body)
                    .chars()
                    .take(200)
                    .collect()
            });
        return Err(SubError::Status { status, message });
    }
    serde_json::from_slice(&answer.body).map_err(|e| SubError::BadAnswer(e.to_string()))
}

/// The Whois++ query line (RFC 1835) for `query`, in the form ROADS v2.3 reads as meant
/// (recorded against it: `tests/fixtures/roads/wppd-search-*`): `template=T and
/// attribute=value`; a value with spaces as a quoted phrase (ROADS reads `\ ` as the end of
/// the term); with any substring term, the global `:search=substring` (ROADS drops local
/// `;search=` constraints), which widens the exact terms too: [`record_matches`] takes the
/// answer back to the query.
pub fn whois_line(query: &Query) -> String {
    let mut parts = Vec::new();
    let mut template: Option<&str> = None;
    let mut substring = false;
    for term in query.terms() {
        if template.is_none() {
            template = term.template.as_deref();
        }
        substring |= term.op == MatchOp::Substring;
        let value = String::from_utf8_lossy(&term.value);
        parts.push(format!(
            "{}={}",
            escape(&term.attribute),
            whois_value(&value)
        ));
    }
    let mut line: Vec<String> = template
        .map(|t| format!("template={}", escape(t)))
        .into_iter()
        .collect();
    line.extend(parts);
    let mut line = line.join(" and ");
    if substring {
        line.push_str(":search=substring");
    }
    line
}

/// A value as a Whois++ term: a phrase in double quotes when it holds spaces, else the word
/// with special characters escaped.
fn whois_value(v: &str) -> String {
    if v.chars().any(char::is_whitespace) {
        let words: Vec<String> = v
            .split_whitespace()
            .map(|w| w.replace(['"', '\\'], ""))
            .collect();
        format!("\"{}\"", words.join(" "))
    } else {
        escape(v)
    }
}

fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if !(c.is_alphanumeric() || matches!(c, '-' | '.' | '_' | '@' | '*')) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// True when a Whois++ server's record matches `query` by Whois++'s rules, as our own
/// Whois++ front-end matches: the template (when the query names one) ignoring case; each
/// term's attribute by base name ignoring case (`Author-2` is `Author`), an exact term's
/// value equal to the record's or one of its words, a substring term's anywhere, case
/// ignored. A server's index is of words, so word matches are what its referral promised.
pub fn record_matches(record: &cip_proto::whoispp_answer::Record, query: &Query) -> bool {
    query.terms().iter().all(|term| {
        if let Some(t) = &term.template
            && !t.eq_ignore_ascii_case(&record.template)
        {
            return false;
        }
        let want = String::from_utf8_lossy(&term.value).to_lowercase();
        record.attributes.iter().any(|(name, value)| {
            let base = cip_proto::soif::attr::base_name(name);
            if !base.eq_ignore_ascii_case(cip_proto::soif::attr::base_name(&term.attribute)) {
                return false;
            }
            let value = value.to_lowercase();
            match term.op {
                MatchOp::Substring => value.contains(&want),
                MatchOp::Exact => {
                    value.trim() == want
                        || value
                            .split(|c: char| !c.is_alphanumeric())
                            .any(|w| w == want)
                        || (want.contains(' ') && value.contains(&want))
                }
            }
        })
    })
}

/// Asks the Whois++ server at `host`:`port` for `query` and reads its whole answer (the
/// server closes after it, as ROADS' `wppd` does, or ends it with `% 226`/`% 203`).
///
/// # Errors
/// See [`SubError`]; a `% 5xx` refusal is a [`SubError::Status`].
pub async fn ask_whois(
    host: &str,
    port: u16,
    query: &Query,
    timeout: Duration,
    max_bytes: u64,
) -> Result<WhoisAnswer, SubError> {
    let run = async {
        let mut stream = tokio::net::TcpStream::connect((host, port))
            .await
            .map_err(|e| SubError::Unreachable(format!("{host}:{port}: {e}")))?;
        let line = format!("{}\r\n", whois_line(query));
        stream
            .write_all(line.as_bytes())
            .await
            .map_err(|e| SubError::Unreachable(e.to_string()))?;
        let mut buf = Vec::new();
        let mut chunk = [0u8; 16 * 1024];
        loop {
            let n = stream
                .read(&mut chunk)
                .await
                .map_err(|e| SubError::Unreachable(e.to_string()))?;
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
            if buf.len() as u64 > max_bytes {
                return Err(SubError::BadAnswer(format!("more than {max_bytes} bytes")));
            }
            if ended(&buf) {
                break;
            }
        }
        Ok(buf)
    };
    let bytes = tokio::time::timeout(timeout, run)
        .await
        .map_err(|_| SubError::Timeout(timeout))??;
    let limits = AnswerLimits {
        max_bytes: usize::try_from(max_bytes).unwrap_or(usize::MAX),
        ..AnswerLimits::default()
    };
    parse_answer(&bytes, &limits).map_err(|e| match e {
        cip_proto::whoispp_answer::AnswerError::Refused { code, message, .. } => SubError::Status {
            status: code,
            message,
        },
        e => SubError::BadAnswer(e.to_string()),
    })
}

/// True once a Whois++ answer holds a complete `% 226` (transaction complete) or `% 203`
/// (goodbye) line; only the tail is looked at, as the answer grows.
fn ended(buf: &[u8]) -> bool {
    let tail = &buf[buf.len().saturating_sub(512)..];
    let mut lines: Vec<&[u8]> = tail.split(|b| *b == b'\n').collect();
    lines.pop(); // the piece after the last newline is not a whole line yet
    lines
        .iter()
        .any(|l| l.starts_with(b"% 203") || l.starts_with(b"% 226"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_lines() {
        assert_eq!(search_url("http://h:1/"), "http://h:1/v1/search");
        assert_eq!(search_url("http://h/cip/"), "http://h/cip/v1/search");
        assert_eq!(search_url("http://h/x?y=1"), "http://h/x/v1/search");
        let q = Query::parse("DOCUMENT:Keywords=centroid & Title~common indexing").unwrap();
        assert_eq!(
            whois_line(&q),
            "template=DOCUMENT and Keywords=centroid and Title=\"common indexing\":search=substring"
        );
        // Our own Whois++ parser reads it back.
        let parsed = cip_proto::whoispp::parse(&whois_line(&q), 50).unwrap();
        assert_eq!(parsed.disjuncts.len(), 1);
        assert_eq!(parsed.disjuncts[0].terms.len(), 2);
        assert_eq!(parsed.disjuncts[0].terms[1].value, "common indexing");
        let q = Query::parse("Author-Name=O'Brien").unwrap();
        assert_eq!(whois_line(&q), "Author-Name=O\\'Brien");
    }

    #[test]
    fn records_are_taken_back_to_the_query() {
        let record = |template: &str, attrs: &[(&str, &str)]| cip_proto::whoispp_answer::Record {
            template: template.into(),
            server_handle: "s".into(),
            handle: "h".into(),
            attributes: attrs
                .iter()
                .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
                .collect(),
        };
        let r = record(
            "document",
            &[
                ("Title", "Common Gateways"),
                ("Keywords", "centroid, indexing, whois++"),
                ("Author-Name-2", "Jon Knight"),
            ],
        );
        let fits = |q: &str| record_matches(&r, &Query::parse(q).unwrap());
        assert!(fits("DOCUMENT:Keywords=centroid"));
        assert!(fits("Author-Name=knight"));
        assert!(fits("Title~gate"));
        assert!(
            !fits("Title=\"Common Indexing\""),
            "a phrase is not its first word"
        );
        assert!(!fits("FILE:Keywords=centroid"), "another template");
        assert!(!fits("Keywords=cent"), "exact is a whole word");
        assert!(fits("Keywords=centroid & Title~common"));
    }

    #[test]
    fn answer_ends() {
        assert!(ended(b"% 220 hi\r\n% 226 done\r\n% 203 bye\r\n"));
        assert!(ended(b"% 226 done\r\n"));
        assert!(!ended(b"% 220 hi\r\n# FULL a b\r\n"));
    }

    #[test]
    fn failures() {
        let rto = Duration::from_millis(100);
        assert!(SubError::Unreachable("refused".into()).is_failure(Duration::ZERO, rto));
        assert!(SubError::Timeout(Duration::from_secs(1)).is_failure(Duration::from_secs(1), rto));
        assert!(
            !SubError::Timeout(Duration::from_millis(20))
                .is_failure(Duration::from_millis(20), rto)
        );
        let s = |status| SubError::Status {
            status,
            message: String::new(),
        };
        assert!(!s(429).is_failure(Duration::ZERO, rto));
        assert!(!s(503).is_failure(Duration::ZERO, rto));
        assert!(s(500).is_failure(Duration::ZERO, rto));
    }
}
