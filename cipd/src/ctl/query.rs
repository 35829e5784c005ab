//! `cipctl query`: ask a node's HTTP front-end for referrals, and optionally chase them.
//!
//! `--follow` walks the referral graph breadth-first, as RFC 2651 §4 asks of clients: every
//! node visited is remembered by DSI and never asked twice (the RFC 1914 loop detection with
//! the DSI as the server handle), and every node that holds matching objects is asked for
//! them (`/v1/objects`).

use std::collections::{HashSet, VecDeque};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use comfy_table::Table;
use serde::Serialize;

pub use crate::model::url::percent_encode;
use crate::sys::http::{FetchError, FetchLimits, HttpClient};

use crate::model::answer::{ObjectsAnswer, QueryAnswer};

/// Most nodes `--follow` visits.
pub const MAX_FOLLOW: usize = 64;

/// `cipctl query` arguments.
#[derive(Debug, clap::Args)]
pub struct QueryArgs {
    /// The node's HTTP front-end (`http://127.0.0.1:7080`, or `https://...`).
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
    /// Most referrals per node (the server's default page, 10, when not given; capped by its
    /// `limits.max_referrals`).
    #[arg(long)]
    pub limit: Option<usize>,
    /// Per-request timeout.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// TLS for `https://` servers.
    #[command(flatten)]
    pub tls: ClientTlsArgs,
}

/// TLS for `https://` servers: a mesh's own CA (trusted besides the system's roots), and a
/// client certificate for servers that require one. Proxies come from the environment
/// (`HTTPS_PROXY`, `NO_PROXY`, ...).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ClientTlsArgs {
    /// CA bundle (PEM) trusted besides the system's roots (a mesh's own CA).
    #[arg(long = "ca", value_name = "PEM")]
    pub ca: Option<PathBuf>,
    /// Client certificate chain (PEM), for servers that require client certificates.
    #[arg(long = "cert", value_name = "PEM", requires = "key")]
    pub cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long = "key", value_name = "PEM", requires = "cert")]
    pub key: Option<PathBuf>,
}

impl ClientTlsArgs {
    /// The HTTP client these settings describe.
    ///
    /// # Errors
    /// When a file cannot be read, naming it.
    pub fn client(&self) -> anyhow::Result<HttpClient> {
        let pair = self.cert.as_deref().zip(self.key.as_deref());
        crate::model::config::HttpClientConfig::default()
            .client(self.ca.as_deref(), pair)
            .map_err(anyhow::Error::msg)
    }
}

/// Runs `cipctl query`.
pub fn run(args: QueryArgs) -> ExitCode {
    super::block_on(run_async(&args), |()| ExitCode::SUCCESS)
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
        let client = args.tls.client()?;
        let answer = referrals(&client, &args.server, args).await?;
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
    let client = args.tls.client()?;
    let mut seen_dsi: HashSet<String> = HashSet::new();
    let mut seen_url: HashSet<String> = HashSet::new();
    let mut queue = VecDeque::from([args.server.trim_end_matches('/').to_owned()]);
    let mut visits = Vec::new();
    while let Some(server) = queue.pop_front() {
        if visits.len() >= MAX_FOLLOW || !seen_url.insert(server.clone()) {
            continue;
        }
        let answer = match referrals(&client, &server, args).await {
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
            match objects(&client, &server, args).await {
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
            let followable = |u: &&String| u.starts_with("http://") || u.starts_with("https://");
            match r.base_uri.iter().find(followable) {
                Some(u) => queue.push_back(u.trim_end_matches('/').to_owned()),
                None => eprintln!(
                    "cipctl: cannot follow {} ({}): no http:// or https:// base-uri",
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
    client: &HttpClient,
    server: &str,
    args: &QueryArgs,
) -> anyhow::Result<QueryAnswer> {
    let mut path = format!("/v1/referrals?q={}", percent_encode(&args.query));
    if args.possible {
        path.push_str("&possible=true");
    }
    if let Some(n) = args.limit {
        path.push_str(&format!("&limit={n}"));
    }
    get_json_with(client, server, &path, args.timeout).await
}

async fn objects(
    client: &HttpClient,
    server: &str,
    args: &QueryArgs,
) -> anyhow::Result<ObjectsAnswer> {
    let path = format!("/v1/objects?q={}", percent_encode(&args.query));
    get_json_with(client, server, &path, args.timeout).await
}

/// Largest JSON answer read.
const MAX_ANSWER_BYTES: u64 = 256 << 20;

/// GETs `path` from `server` with a client of default settings and parses the JSON answer;
/// a JSON error body becomes the error.
///
/// # Errors
/// Connection failures, timeouts, non-2xx statuses and bodies that do not parse.
pub async fn get_json<T: serde::de::DeserializeOwned>(
    server: &str,
    path: &str,
    timeout: Duration,
) -> anyhow::Result<T> {
    let client = ClientTlsArgs::default().client()?;
    get_json_with(&client, server, path, timeout).await
}

/// As [`get_json`], with `client`.
///
/// # Errors
/// As [`get_json`].
pub async fn get_json_with<T: serde::de::DeserializeOwned>(
    client: &HttpClient,
    server: &str,
    path: &str,
    timeout: Duration,
) -> anyhow::Result<T> {
    let url = format!("{}{path}", server.trim_end_matches('/'));
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::ACCEPT,
        reqwest::header::HeaderValue::from_static("application/json"),
    );
    let limits = FetchLimits {
        timeout,
        max_bytes: MAX_ANSWER_BYTES,
    };
    let answer = client
        .get_any(&url, headers, limits)
        .await
        .map_err(|e| match e {
            FetchError::Timeout { limit, .. } => anyhow::anyhow!(
                "{server}: no answer within {}",
                humantime::format_duration(limit)
            ),
            e => e.into(),
        })?;
    let status = answer.status.as_u16();
    if !(200..300).contains(&status) {
        let msg = serde_json::from_slice::<crate::front::api::ErrorBody>(&answer.body)
            .map(|e| e.message)
            .unwrap_or_else(|_| String::from_utf8_lossy(&answer.body).into_owned());
        bail!("{server}: HTTP {status}: {msg}");
    }
    serde_json::from_slice(&answer.body)
        .with_context(|| format!("{server}: answer is not the expected JSON"))
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
    if a.more {
        println!(
            "more referrals rank below these: ask with --limit {} (or more)",
            a.referrals.len() * 10
        );
    }
}

/// An objects table (template, URL, title, author) of `objects`.
pub fn objects_table<'a>(
    objects: impl IntoIterator<Item = (&'a str, &'a str, &'a [(String, String)])>,
) -> Table {
    let mut t = Table::new();
    t.set_header(["template", "url", "title", "author"]);
    for (template, url, attributes) in objects {
        let get = |name: &str| {
            attributes
                .iter()
                .find(|(n, _)| cip_proto::soif::attr::attribute_matches(name, n))
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        };
        t.add_row([
            template.to_owned(),
            url.to_owned(),
            get("Title"),
            get("Author"),
        ]);
    }
    t
}

fn print_objects(o: &ObjectsAnswer) {
    let t = objects_table(
        o.objects
            .iter()
            .map(|x| (x.template.as_str(), x.url.as_str(), x.attributes.as_slice())),
    );
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
