//! `cipctl rdm`: speaks RDM to any server (`http://host:port/rdm/incoming`, or just the base
//! URL, to which `/rdm/incoming` is added).
//!
//! * `status URL`: the server's status (its HTML, tags removed).
//! * `server URL`: the server description, as SOIF.
//! * `schema URL [--scope "defined ATTR"]`: the schema, as SOIF.
//! * `taxonomy URL [--scope "descendant ROOT"]`: the taxonomy, as SOIF.
//! * `get URL [--since DATE] [--deleted] [--query Q [--referrals]] [--attributes A,B]
//!   [--hits N] [--order -A,+B]`: RDs, as a SOIF stream.
//!
//! Every command takes `--catalog CSID`. Exit status: 0 done, 1 the server answered with an
//! RDM error (its `RDM-Error-Message` is printed), 2 the exchange failed.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use cip_proto::rdm::{Body, Csid, GathererScope, Header, Message, Query, RdmType, View};
use clap::{Args, Subcommand};

use super::EXIT_INVALID_INPUT;
use crate::pipeline::rdm_pull::{ClientError, exchange};
use crate::sys::http::FetchLimits;

/// The `cipctl rdm` subcommands.
#[derive(Debug, Subcommand)]
pub enum RdmCommand {
    /// Ask whether the server is there (status-request).
    Status(Target),
    /// Print the server description (server-description-request).
    Server(Target),
    /// Print the schema (schema-description-request, schema-basic).
    Schema {
        /// Server and catalog.
        #[command(flatten)]
        target: Target,
        /// The schema-basic scope.
        #[arg(long, default_value = "defined SOIF-Attribute")]
        scope: String,
    },
    /// Print the taxonomy (taxonomy-description-request, taxonomy-basic).
    Taxonomy {
        /// Server and catalog.
        #[command(flatten)]
        target: Target,
        /// The taxonomy-basic scope.
        #[arg(long, default_value = "descendant ROOT")]
        scope: String,
    },
    /// Print RDs (rd-request): all, changed since a date, deleted, or matching a query.
    Get {
        /// Server and catalog.
        #[command(flatten)]
        target: Target,
        /// Only RDs changed since this HTTP date (`Sun, 06 Nov 1994 08:49:37 GMT`).
        #[arg(long)]
        since: Option<String>,
        /// Ask for deleted RDs instead (rd-request-deleted).
        #[arg(long)]
        deleted: bool,
        /// A query in cipd's syntax (cip-query) instead of a gatherer scope.
        #[arg(long, conflicts_with_all = ["since", "deleted"])]
        query: Option<String>,
        /// With --query: ask for referrals (cip-referral) rather than RDs.
        #[arg(long, requires = "query")]
        referrals: bool,
        /// View: attributes to send (comma-separated).
        #[arg(long)]
        attributes: Option<String>,
        /// View: most RDs.
        #[arg(long)]
        hits: Option<usize>,
        /// View: order (`-Score,+Title`).
        #[arg(long)]
        order: Option<String>,
    },
}

/// Where to send a request.
#[derive(Debug, Clone, Args)]
pub struct Target {
    /// The server: `http://host:port/rdm/incoming` or `http://host:port` (or `https://`).
    pub url: String,
    /// The catalog (`x-catalog://host:port/name`); default: the server's.
    #[arg(long)]
    pub catalog: Option<String>,
    /// Time allowed for the exchange.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// Largest answer accepted, in bytes.
    #[arg(long, default_value_t = 1 << 30)]
    pub max_bytes: u64,
    /// TLS for `https://` servers.
    #[command(flatten)]
    pub tls: crate::ctl::query::ClientTlsArgs,
}

impl Target {
    fn endpoint(&self) -> String {
        let u = self.url.trim_end_matches('/');
        let has_path = u.split("://").nth(1).is_some_and(|rest| rest.contains('/'));
        if has_path {
            u.to_owned()
        } else {
            format!("{u}/rdm/incoming")
        }
    }

    fn message(&self, ty: RdmType, ql: Option<&str>, q: Option<Query>) -> anyhow::Result<Message> {
        let csid = match &self.catalog {
            Some(c) => Some(Csid::parse(c)?),
            None => None,
        };
        Ok(Message::new(
            Header {
                query_language: ql.map(str::to_owned),
                csid,
                ..Header::new(ty)
            },
            q.map_or(Body::Empty, Body::Query),
        ))
    }
}

fn scoped(scope: &str, view: View) -> Option<Query> {
    Some(Query {
        scope: Some(scope.to_owned()),
        view,
    })
}

/// Runs a `cipctl rdm` subcommand.
pub fn run(cmd: RdmCommand) -> ExitCode {
    super::block_on(run_async(cmd), |code| code)
}

async fn run_async(cmd: RdmCommand) -> anyhow::Result<ExitCode> {
    let (target, msg) = match cmd {
        RdmCommand::Status(t) => {
            let m = t.message(RdmType::StatusRequest, None, None)?;
            (t, m)
        }
        RdmCommand::Server(t) => {
            let m = t.message(RdmType::ServerDescriptionRequest, None, None)?;
            (t, m)
        }
        RdmCommand::Schema { target, scope } => {
            let m = target.message(
                RdmType::SchemaDescriptionRequest,
                Some("schema-basic"),
                scoped(&scope, View::default()),
            )?;
            (target, m)
        }
        RdmCommand::Taxonomy { target, scope } => {
            let m = target.message(
                RdmType::TaxonomyDescriptionRequest,
                Some("taxonomy-basic"),
                scoped(&scope, View::default()),
            )?;
            (target, m)
        }
        RdmCommand::Get {
            target,
            since,
            deleted,
            query,
            referrals,
            attributes,
            hits,
            order,
        } => {
            let view = View::parse(
                attributes.as_deref(),
                hits.map(|h| h.to_string()).as_deref(),
                order.as_deref(),
            )?;
            let ty = if deleted {
                RdmType::RdRequestDeleted
            } else {
                RdmType::RdRequest
            };
            let (ql, scope) = match (query, since) {
                (Some(q), _) => (
                    if referrals {
                        "cip-referral"
                    } else {
                        "cip-query"
                    },
                    q,
                ),
                (None, Some(d)) => {
                    let t = cip_proto::http_date::parse(&d)
                        .or_else(|| cip_proto::hinadi::date::parse(&d))
                        .with_context(|| format!("--since {d:?} is not an HTTP date"))?;
                    ("gatherer", GathererScope::Since(t).to_scope())
                }
                (None, None) => ("gatherer", GathererScope::All.to_scope()),
            };
            let m = target.message(ty, Some(ql), scoped(&scope, view))?;
            (target, m)
        }
    };
    let limits = FetchLimits {
        timeout: target.timeout,
        max_bytes: target.max_bytes,
    };
    let url = target.endpoint();
    let client = target.tls.client()?;
    let answer = match exchange(&client, &url, &msg, limits).await {
        Ok((_, m)) => m,
        Err(ClientError::Refused {
            url,
            status,
            message,
        }) => {
            eprintln!("cipctl: {url}: {status}: {message}");
            return Ok(ExitCode::from(EXIT_INVALID_INPUT));
        }
        Err(e) => return Err(e.into()),
    };
    let mut out = std::io::stdout().lock();
    match answer.body {
        Body::Html(h) => writeln!(out, "{}", strip_tags(&h))?,
        Body::Objects(objs) => {
            for o in objs {
                out.write_all(&o.to_bytes())?;
                out.write_all(b"\n")?;
            }
        }
        Body::Empty | Body::Query(_) => {}
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// The text of an HTML document, tags removed, blank lines dropped.
fn strip_tags(html: &str) -> String {
    let mut out = String::new();
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => in_tag = true,
            '>' => in_tag = false,
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    out.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(url: &str) -> Target {
        Target {
            url: url.into(),
            catalog: None,
            timeout: Duration::from_secs(1),
            max_bytes: 1,
            tls: crate::ctl::query::ClientTlsArgs::default(),
        }
    }

    #[test]
    fn endpoints_and_html() {
        assert_eq!(target("http://h:1").endpoint(), "http://h:1/rdm/incoming");
        assert_eq!(target("http://h:1/").endpoint(), "http://h:1/rdm/incoming");
        assert_eq!(target("http://h:1/x/rdm").endpoint(), "http://h:1/x/rdm");
        assert_eq!(
            strip_tags(&cip_proto::rdm::status_html("T", "a <b> & c")),
            "T\nT\na <b> & c"
        );
    }
}
