//! `cipctl query`: ask a node's HTTP front-end for referrals, and optionally chase them.
//!
//! `--follow` walks the referral graph breadth-first, as RFC 2651 §4 asks of clients: every
//! node visited is remembered by DSI and never asked twice (the RFC 1914 loop detection with
//! the DSI as the server handle), and every node that holds matching objects is asked for
//! them (`/v1/objects`).

use std::collections::{HashSet, VecDeque};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use bytes::Bytes;
use comfy_table::Table;
use http_body_util::{BodyExt, Empty};
use hyper::Request;
use hyper_util::rt::TokioIo;
use serde::Serialize;

use crate::state::{ObjectsAnswer, QueryAnswer};

/// Most nodes `--follow` visits.
pub const MAX_FOLLOW: usize = 64;

/// `cipctl query` arguments.
#[derive(Debug, clap::Args)]
pub struct QueryArgs {
    /// The node's HTTP front-end (`http://127.0.0.1:7080`).
    #[arg(long, value_name = "URL")]
    pub server: String,
    /// The query (`DOCUMENT:Author=Garcia`, `Title~mesh & Author~garcia`).
    pub query: String,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Include possible referrals (peers whose thresholds may hide matches).
    #[arg(long)]
    pub possible: bool,
    /// Chase referrals to the nodes holding objects and print what they return.
    #[arg(long)]
    pub follow: bool,
    /// Most referrals per node.
    #[arg(long)]
    pub limit: Option<usize>,
    /// Per-request timeout.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
}

/// Runs `cipctl query`.
pub fn run(args: QueryArgs) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return super::fail(&anyhow::Error::from(e)),
    };
    match rt.block_on(run_async(&args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => super::fail(&e),
    }
}

/// What `--follow` found at one node.
#[derive(Debug, Serialize)]
pub struct Visit {
    /// The node's URL.
    pub server: String,
    /// Its answer.
    pub answer: QueryAnswer,
    /// Its matching objects, when it holds any.
    pub objects: Option<ObjectsAnswer>,
}

async fn run_async(args: &QueryArgs) -> anyhow::Result<()> {
    if !args.follow {
        let answer = referrals(&args.server, args, args.timeout).await?;
        if args.json {
            println!("{}", serde_json::to_string_pretty(&answer)?);
        } else {
            print_answer(&args.server, &answer);
        }
        return Ok(());
    }
    let visits = follow(args).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&visits)?);
        return Ok(());
    }
    for v in &visits {
        print_answer(&v.server, &v.answer);
        if let Some(o) = &v.objects {
            print_objects(o);
        }
    }
    let found: u64 = visits
        .iter()
        .filter_map(|v| v.objects.as_ref())
        .map(|o| o.total)
        .sum();
    println!(
        "visited {} node(s); {found} matching object(s)",
        visits.len()
    );
    Ok(())
}

/// Chases referrals from `args.server` (see the module doc).
///
/// # Errors
/// When the first node cannot be asked; later failures are reported and skipped.
pub async fn follow(args: &QueryArgs) -> anyhow::Result<Vec<Visit>> {
    let mut seen_dsi: HashSet<String> = HashSet::new();
    let mut seen_url: HashSet<String> = HashSet::new();
    let mut queue = VecDeque::from([args.server.trim_end_matches('/').to_owned()]);
    let mut visits = Vec::new();
    while let Some(server) = queue.pop_front() {
        if visits.len() >= MAX_FOLLOW || !seen_url.insert(server.clone()) {
            continue;
        }
        let answer = match referrals(&server, args, args.timeout).await {
            Ok(a) => a,
            Err(e) if !visits.is_empty() => {
                eprintln!("cipctl: skipping {server}: {e:#}");
                continue;
            }
            Err(e) => return Err(e),
        };
        if !answer.dsi.is_empty() && !seen_dsi.insert(answer.dsi.clone()) {
            continue;
        }
        let objects = if answer.local > 0 {
            match objects(&server, &args.query, args.timeout).await {
                Ok(o) => Some(o),
                Err(e) => {
                    eprintln!("cipctl: cannot fetch objects from {server}: {e:#}");
                    None
                }
            }
        } else {
            None
        };
        for r in &answer.referrals {
            if seen_dsi.contains(&r.dsi) {
                continue;
            }
            match r.base_uri.iter().find(|u| u.starts_with("http://")) {
                Some(u) => queue.push_back(u.trim_end_matches('/').to_owned()),
                None => eprintln!(
                    "cipctl: cannot follow {} ({}): no http base-uri",
                    r.dsi,
                    r.base_uri.join(" ")
                ),
            }
        }
        visits.push(Visit {
            server,
            answer,
            objects,
        });
    }
    Ok(visits)
}

async fn referrals(
    server: &str,
    args: &QueryArgs,
    timeout: Duration,
) -> anyhow::Result<QueryAnswer> {
    let mut path = format!("/v1/referrals?q={}", percent_encode(&args.query));
    if args.possible {
        path.push_str("&possible=true");
    }
    if let Some(n) = args.limit {
        path.push_str(&format!("&limit={n}"));
    }
    get_json(server, &path, timeout).await
}

async fn objects(server: &str, query: &str, timeout: Duration) -> anyhow::Result<ObjectsAnswer> {
    get_json(
        server,
        &format!("/v1/objects?q={}", percent_encode(query)),
        timeout,
    )
    .await
}

/// GETs `path` from `server` and parses the JSON answer; a JSON error body becomes the error.
///
/// # Errors
/// Connection failures, timeouts, non-2xx statuses and bodies that do not parse.
pub async fn get_json<T: serde::de::DeserializeOwned>(
    server: &str,
    path: &str,
    timeout: Duration,
) -> anyhow::Result<T> {
    let (status, body) = tokio::time::timeout(timeout, get(server, path))
        .await
        .with_context(|| {
            format!(
                "{server}: no answer within {}",
                humantime::format_duration(timeout)
            )
        })??;
    if !(200..300).contains(&status) {
        let msg = serde_json::from_slice::<crate::http::ErrorBody>(&body)
            .map(|e| e.message)
            .unwrap_or_else(|_| String::from_utf8_lossy(&body).into_owned());
        bail!("{server}: HTTP {status}: {msg}");
    }
    serde_json::from_slice(&body)
        .with_context(|| format!("{server}: answer is not the expected JSON"))
}

async fn get(server: &str, path: &str) -> anyhow::Result<(u16, Bytes)> {
    let Some(rest) = server.strip_prefix("http://") else {
        bail!("{server}: only http:// servers are supported");
    };
    let authority = rest.split('/').next().unwrap_or(rest);
    if authority.is_empty() {
        bail!("{server}: no host");
    }
    let addr = if authority.contains(':') {
        authority.to_owned()
    } else {
        format!("{authority}:80")
    };
    let stream = tokio::net::TcpStream::connect(&addr)
        .await
        .with_context(|| format!("cannot connect to {addr}"))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    let driver = tokio::spawn(async move {
        let _ = conn.await;
    });
    let req = Request::get(path)
        .header(hyper::header::HOST, authority)
        .header(hyper::header::ACCEPT, "application/json")
        .body(Empty::<Bytes>::new())?;
    let resp = sender.send_request(req).await?;
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await?.to_bytes();
    driver.abort();
    Ok((status, body))
}

/// Percent-encodes everything but RFC 3986 unreserved characters.
pub fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn print_answer(server: &str, a: &QueryAnswer) {
    println!(
        "{server} (DSI {}): {} referral(s), {} local object(s) for {:?}",
        a.dsi,
        a.referrals.len(),
        a.local,
        a.query
    );
    if a.referrals.is_empty() {
        return;
    }
    let mut t = Table::new();
    t.set_header([
        "#",
        "DSI",
        "description",
        "count",
        "total",
        "kind",
        "base-uri",
        "values",
    ]);
    for (i, r) in a.referrals.iter().enumerate() {
        let values: Vec<String> = r.values.iter().map(|(v, c)| format!("{v} ({c})")).collect();
        t.add_row([
            (i + 1).to_string(),
            r.dsi.clone(),
            r.dsi_description.clone().unwrap_or_default(),
            r.count.to_string(),
            r.total.to_string(),
            if r.definite { "definite" } else { "possible" }.to_owned(),
            r.base_uri.join(" "),
            values.join(", "),
        ]);
    }
    println!("{t}");
}

fn print_objects(o: &ObjectsAnswer) {
    let mut t = Table::new();
    t.set_header(["template", "url", "title", "author"]);
    for obj in &o.objects {
        let get = |name: &str| {
            obj.attributes
                .iter()
                .find(|(n, _)| cip_proto::soif::attr::attribute_matches(name, n))
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        };
        t.add_row([
            obj.template.clone(),
            obj.url.clone(),
            get("Title"),
            get("Author"),
        ]);
    }
    println!(
        "objects at DSI {} ({} of {}):\n{t}",
        o.dsi,
        o.objects.len(),
        o.total
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding() {
        assert_eq!(
            percent_encode("DOCUMENT:Author=Garcia & x"),
            "DOCUMENT%3AAuthor%3DGarcia%20%26%20x"
        );
        assert_eq!(percent_encode("é"), "%C3%A9");
    }
}
