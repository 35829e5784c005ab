//! `cipctl search`: ask a node to search the whole mesh (`/v1/search`), which chases the
//! referrals itself, and print the objects found by the node that holds them; `--trace`
//! draws the tree of sub-queries, `--json` prints the answer as it came.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Duration;

use comfy_table::Table;

use crate::ctl::query::{ClientTlsArgs, get_json_with, percent_encode};
use crate::model::answer::{Asked, SearchAnswer};

/// `cipctl search` arguments.
#[derive(Debug, clap::Args)]
pub struct SearchArgs {
    /// The node's HTTP front-end.
    #[arg(
        long,
        value_name = "URL",
        default_value = "http://127.0.0.1:7080",
        env = "CIPCTL_SERVER"
    )]
    pub server: String,
    /// The query (`DOCUMENT:Author=Garcia`, `Title~mesh & Author~garcia`).
    pub query: String,
    /// Most objects (the node's `search.default_limit` when not given).
    #[arg(long)]
    pub limit: Option<usize>,
    /// Longest the search may take, e.g. `500ms` (the node's `search.deadline` at most).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub deadline: Option<Duration>,
    /// Most hops from the node asked.
    #[arg(long)]
    pub depth: Option<u32>,
    /// Print the answer as JSON.
    #[arg(long)]
    pub json: bool,
    /// Print the tree of sub-queries: which node asked which, how long each took.
    #[arg(long)]
    pub trace: bool,
    /// TLS for `https://` servers.
    #[command(flatten)]
    pub tls: ClientTlsArgs,
}

/// Runs `cipctl search`.
pub fn run(args: SearchArgs) -> ExitCode {
    super::block_on(run_async(&args), |partial| {
        if partial {
            ExitCode::from(3)
        } else {
            ExitCode::SUCCESS
        }
    })
}

/// Asks `args.server` for the search.
///
/// # Errors
/// When the node cannot be asked or answers an error.
pub async fn search(args: &SearchArgs) -> anyhow::Result<SearchAnswer> {
    let client = args.tls.client()?;
    let mut path = format!("/v1/search?q={}", percent_encode(&args.query));
    if let Some(n) = args.limit {
        path.push_str(&format!("&limit={n}"));
    }
    if let Some(d) = args.deadline {
        path.push_str(&format!("&deadline={}", d.as_millis().max(1)));
    }
    if let Some(d) = args.depth {
        path.push_str(&format!("&depth={d}"));
    }
    // The node gives up at its deadline; the client waits a little longer for its answer.
    let wait = args.deadline.unwrap_or(Duration::from_secs(30)) + Duration::from_secs(5);
    get_json_with(&client, &args.server, &path, wait).await
}

/// Prints the answer; true when it was partial (exit status 3).
async fn run_async(args: &SearchArgs) -> anyhow::Result<bool> {
    let answer = search(args).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&answer)?);
        return Ok(answer.partial);
    }
    print!("{}", render(&answer, args.trace));
    Ok(answer.partial)
}

/// The answer as tables: objects by holder, what was not chased, and with `trace` the
/// tree of sub-queries.
pub fn render(a: &SearchAnswer, trace: bool) -> String {
    let mut out = String::new();
    let mut by_holder: BTreeMap<(&str, &str), Vec<&crate::model::answer::FoundObject>> =
        BTreeMap::new();
    for o in &a.objects {
        by_holder
            .entry((o.holder.as_str(), o.holder_uri.as_str()))
            .or_default()
            .push(o);
    }
    for ((holder, uri), objects) in &by_holder {
        let t = crate::ctl::query::objects_table(
            objects
                .iter()
                .map(|o| (o.template.as_str(), o.url.as_str(), o.attributes.as_slice())),
        );
        out.push_str(&format!(
            "{holder} ({uri}): {} object(s)\n{t}\n",
            objects.len()
        ));
    }
    if !a.unchased.is_empty() {
        let mut t = Table::new();
        t.set_header(["DSI", "base-uri", "count", "reason", "via", "detail"]);
        for u in &a.unchased {
            t.add_row([
                u.dsi.clone(),
                u.base_uri.join(" "),
                u.count.to_string(),
                u.reason.as_str().to_owned(),
                u.via.clone(),
                u.detail.clone().unwrap_or_default(),
            ]);
        }
        out.push_str(&format!("not chased:\n{t}\n"));
    }
    if trace {
        out.push_str(&format!(
            "trace {}:\n{}",
            a.trace_id,
            trace_tree(&a.dsi, &a.nodes)
        ));
    }
    out.push_str(&format!(
        "{} object(s){} from {} node(s) asked, {} sub-quer{} in {:.1} ms{}\n",
        a.objects.len(),
        if a.more {
            " (more exist: raise --limit)"
        } else {
            ""
        },
        a.nodes.len() + 1,
        a.subqueries,
        if a.subqueries == 1 { "y" } else { "ies" },
        a.elapsed_ms,
        if a.partial {
            "; PARTIAL: objects may be missing (see \"not chased\")"
        } else {
            ""
        }
    ));
    out
}

/// The sub-queries as a tree under `root`, each line `dsi (direction, ms, outcome, objects)`.
pub fn trace_tree(root: &str, nodes: &[Asked]) -> String {
    let mut out = format!("{root}\n");
    fn walk(out: &mut String, via: &str, nodes: &[Asked], prefix: &str, depth: u32) {
        let children: Vec<&Asked> = nodes
            .iter()
            .filter(|n| n.via == via && n.depth == depth)
            .collect();
        for (i, n) in children.iter().enumerate() {
            let last = i + 1 == children.len();
            let error = n
                .error
                .as_deref()
                .map(|e| format!(": {e}"))
                .unwrap_or_default();
            out.push_str(&format!(
                "{prefix}{} {} [{}] {} {:.1} ms, {} object(s){error}\n",
                if last { "└─" } else { "├─" },
                n.dsi,
                n.direction,
                n.outcome,
                n.ms,
                n.objects
            ));
            let next = format!("{prefix}{}", if last { "   " } else { "│  " });
            walk(out, &n.dsi, nodes, &next, depth + 1);
        }
    }
    walk(&mut out, root, nodes, "", 1);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(dsi: &str, via: &str, depth: u32) -> Asked {
        Asked {
            dsi: dsi.into(),
            uri: format!("http://{dsi}/"),
            via: via.into(),
            depth,
            direction: "down".into(),
            ms: 1.0,
            outcome: "ok".into(),
            objects: 1,
            error: None,
        }
    }

    #[test]
    fn the_trace_is_a_tree() {
        let nodes = [
            asked("mid", "leaf", 1),
            asked("root", "mid", 2),
            asked("sib", "mid", 2),
            asked("mid2", "root", 3),
        ];
        let t = trace_tree("leaf", &nodes);
        assert_eq!(
            t,
            "leaf\n└─ mid [down] ok 1.0 ms, 1 object(s)\n   ├─ root [down] ok 1.0 ms, 1 object(s)\n   │  └─ mid2 [down] ok 1.0 ms, 1 object(s)\n   └─ sib [down] ok 1.0 ms, 1 object(s)\n"
        );
    }
}
