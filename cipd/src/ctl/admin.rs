//! `cipctl` commands that talk to a running daemon over its admin socket.
//!
//! Output is a readable table by default and the daemon's JSON result with `--json`.
//! Exit status: 0 done; 1 the daemon refused the command (unknown peer, bad query, ...);
//! 3 the daemon could not be reached (no socket, permissions, not running).

use std::io;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand};
use comfy_table::{ContentArrangement, Table, presets::UTF8_FULL_CONDENSED};
use serde_json::Value;

use super::EXIT_INVALID_INPUT;
use crate::front::admin::protocol::{ExplainInfo, PeerInfo, StatusInfo, TableRowInfo};
use crate::front::admin::{self, AdminRequest};

/// Exit status when the daemon cannot be reached.
pub const EXIT_UNREACHABLE: u8 = 3;

/// Where the daemon's admin socket is (a global `cipctl` option).
#[derive(Debug, Clone, Args)]
pub struct AdminOptions {
    /// Path of the daemon's admin socket [default: $XDG_RUNTIME_DIR/cipd/admin.sock or
    /// /tmp/cipd-$USER/admin.sock, as the default config uses].
    #[arg(long, global = true, env = "CIPD_ADMIN_SOCKET")]
    pub socket: Option<PathBuf>,
}

/// Output options of every admin command.
#[derive(Debug, Clone, Copy, Default, Args)]
pub struct Output {
    /// Print the daemon's JSON result instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Commands answered by a running daemon.
#[derive(Debug, Clone, Subcommand)]
pub enum AdminCommand {
    /// Version, uptime, identity, listeners, objects held, peers, table size.
    Status {
        /// Output format.
        #[command(flatten)]
        out: Output,
    },
    /// Peers: address, role, DSI, last poll and success, last error, hint age, counts.
    Peers {
        /// Output format.
        #[command(flatten)]
        out: Output,
    },
    /// The hint table: values with per-peer object counts.
    Table {
        /// Output format.
        #[command(flatten)]
        out: Output,
        /// Only this attribute (`Template:Attribute` or a bare attribute).
        #[arg(long)]
        attr: Option<String>,
        /// Only this peer (DSI).
        #[arg(long)]
        peer: Option<String>,
        /// Only values starting with this prefix (case-insensitive).
        #[arg(long)]
        prefix: Option<String>,
        /// At most this many rows, largest totals first.
        #[arg(long, default_value_t = 50)]
        top: usize,
    },
    /// Show the referrals for a query and how each rank was computed.
    Explain {
        /// Output format.
        #[command(flatten)]
        out: Output,
        /// The query, e.g. 'DOCUMENT:Author=Garcia'.
        query: String,
        /// Include possible referrals (peers whose threshold hides rare values).
        #[arg(long)]
        possible: bool,
    },
    /// Poll a peer now.
    Poll {
        /// Output format.
        #[command(flatten)]
        out: Output,
        /// The peer's configured name, address or DSI.
        peer: String,
    },
    /// Re-read the configuration and local collections.
    Reload {
        /// Output format.
        #[command(flatten)]
        out: Output,
    },
    /// Forget a peer's hint until its next poll or push.
    DropPeer {
        /// Output format.
        #[command(flatten)]
        out: Output,
        /// The peer's DSI.
        dsi: String,
    },
    /// Change the log filter at run time (e.g. `debug`, `cipd=trace,info`).
    LogLevel {
        /// Output format.
        #[command(flatten)]
        out: Output,
        /// An EnvFilter directive.
        level: String,
    },
    /// Print the current out-bound hint as SOIF.
    Export {
        /// Output format.
        #[command(flatten)]
        out: Output,
    },
    /// Print the index object last taken from a peer, as it arrived (for `cipctl hint
    /// verify`).
    PeerHint {
        /// Output format.
        #[command(flatten)]
        out: Output,
        /// The peer's configured name or DSI.
        peer: String,
    },
    /// Print metrics in the Prometheus text format.
    Metrics {
        /// Output format.
        #[command(flatten)]
        out: Output,
    },
    /// Drain in-flight requests and stop the daemon.
    Shutdown {
        /// Output format.
        #[command(flatten)]
        out: Output,
    },
}

impl AdminCommand {
    fn request(&self) -> AdminRequest {
        match self.clone() {
            Self::Status { .. } => AdminRequest::Status,
            Self::Peers { .. } => AdminRequest::Peers,
            Self::Table {
                attr,
                peer,
                prefix,
                top,
                ..
            } => AdminRequest::Table {
                attr,
                peer,
                prefix,
                top,
            },
            Self::Explain {
                query, possible, ..
            } => AdminRequest::Explain { query, possible },
            Self::Poll { peer, .. } => AdminRequest::Poll { peer },
            Self::Reload { .. } => AdminRequest::Reload,
            Self::DropPeer { dsi, .. } => AdminRequest::DropPeer { dsi },
            Self::LogLevel { level, .. } => AdminRequest::LogLevel { level },
            Self::Export { .. } => AdminRequest::Export,
            Self::PeerHint { peer, .. } => AdminRequest::PeerHint { peer },
            Self::Metrics { .. } => AdminRequest::Metrics,
            Self::Shutdown { .. } => AdminRequest::Shutdown,
        }
    }

    fn output(&self) -> Output {
        match self {
            Self::Status { out }
            | Self::Peers { out }
            | Self::Table { out, .. }
            | Self::Explain { out, .. }
            | Self::Poll { out, .. }
            | Self::Reload { out }
            | Self::DropPeer { out, .. }
            | Self::LogLevel { out, .. }
            | Self::Export { out }
            | Self::PeerHint { out, .. }
            | Self::Metrics { out }
            | Self::Shutdown { out } => *out,
        }
    }
}

/// Runs an admin command against the daemon's socket.
pub fn run(cmd: AdminCommand, opts: &AdminOptions) -> ExitCode {
    let path = opts
        .socket
        .clone()
        .unwrap_or_else(admin::default_socket_path);
    let json = cmd.output().json;
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cipctl: cannot start runtime: {e}");
            return ExitCode::from(super::EXIT_FAILURE);
        }
    };
    let response = match runtime.block_on(admin::request(&path, &cmd.request())) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("cipctl: {}", unreachable_message(&path, &e));
            return ExitCode::from(EXIT_UNREACHABLE);
        }
    };
    if !response.ok {
        let (kind, message) = response.error.map_or_else(
            || ("failed".to_owned(), "no reason given".to_owned()),
            |e| (e.kind, e.message),
        );
        if json {
            println!(
                "{}",
                serde_json::json!({"ok": false, "error": {"kind": kind, "message": message}})
            );
        } else {
            eprintln!("cipctl: {message}");
        }
        return ExitCode::from(EXIT_INVALID_INPUT);
    }
    let result = response.result.unwrap_or(Value::Null);
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&result).unwrap_or_default()
        );
        return ExitCode::SUCCESS;
    }
    match render(&cmd, &result) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("cipctl: unexpected answer from the daemon: {e}");
            ExitCode::from(super::EXIT_FAILURE)
        }
    }
}

/// What to tell an operator when the socket cannot be used.
pub fn unreachable_message(path: &Path, e: &io::Error) -> String {
    let p = path.display();
    match e.kind() {
        io::ErrorKind::NotFound => format!(
            "no admin socket at {p}: is cipd running? Check `admin_socket` in its config, or \
             pass --socket PATH (or set CIPD_ADMIN_SOCKET)"
        ),
        io::ErrorKind::PermissionDenied => format!(
            "permission denied on {p}: the admin socket is mode 0600 and belongs to the user \
             cipd runs as; run cipctl as that user"
        ),
        io::ErrorKind::ConnectionRefused => format!(
            "nothing is listening on {p}: cipd is not running (the socket file is stale and is \
             replaced when cipd starts)"
        ),
        _ => format!("cannot talk to the daemon at {p}: {e}"),
    }
}

fn table() -> Table {
    let mut t = Table::new();
    t.load_style(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Dynamic);
    t
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

/// Seconds as a short human duration (`3m12s`).
fn ago(secs: u64) -> String {
    humantime::format_duration(std::time::Duration::from_secs(secs))
        .to_string()
        .replace(' ', "")
}

fn unix_time(secs: Option<u64>) -> String {
    secs.map_or_else(
        || "-".to_owned(),
        |s| {
            humantime::format_rfc3339_seconds(
                std::time::UNIX_EPOCH + std::time::Duration::from_secs(s),
            )
            .to_string()
        },
    )
}

/// Renders a result as operators read it.
fn render(cmd: &AdminCommand, result: &Value) -> Result<String, serde_json::Error> {
    Ok(match cmd {
        AdminCommand::Status { .. } => {
            let s: StatusInfo = serde_json::from_value(result.clone())?;
            let mut t = table();
            t.set_header(["", ""]);
            t.add_row(["version".to_owned(), s.version]);
            t.add_row(["uptime".to_owned(), ago(s.uptime_seconds)]);
            t.add_row(["dsi".to_owned(), s.dsi]);
            if let Some(p) = &s.starting {
                t.add_row(["starting".to_owned(), p.to_string()]);
            }
            t.add_row(["base uris".to_owned(), s.base_uris.join(" ")]);
            for l in s.listeners {
                t.add_row([format!("listener {}", l.kind), l.address]);
            }
            t.add_row(["local objects".to_owned(), s.local_objects.to_string()]);
            t.add_row(["peers".to_owned(), s.peers.to_string()]);
            t.add_row([
                "table".to_owned(),
                format!(
                    "{} peers, {} values, {} entries, {} KiB",
                    s.table.peers,
                    s.table.values,
                    s.table.entries,
                    s.table.bytes / 1024
                ),
            ]);
            t.add_row([
                "peers imported".to_owned(),
                format!("{} of {}", s.import.imported, s.import.expected),
            ]);
            let o = &s.outbound;
            let freshness = if o.built_from >= o.table_generation {
                "current".to_owned()
            } else if !o.eager {
                "built when polled or exported: no poller or push peer".to_owned()
            } else {
                format!("lagging {:.1} s", o.lag_seconds)
            };
            t.add_row([
                "out-bound hint".to_owned(),
                format!(
                    "built from table generation {} of {} ({freshness}); {} builds, last {:.3} s",
                    o.built_from, o.table_generation, o.builds, o.last_build_seconds
                ),
            ]);
            format!("{t}\n")
        }
        AdminCommand::Peers { .. } => {
            let peers: Vec<PeerInfo> = serde_json::from_value(result["peers"].clone())?;
            let mut t = table();
            t.set_header([
                "peer",
                "address",
                "role",
                "dsi",
                "type",
                "last poll",
                "last success",
                "hint age",
                "expires",
                "objects",
                "values",
                "signature",
                "next poll",
                "last error",
            ]);
            for p in peers {
                let mut next = match p.failures {
                    0 => unix_time(p.next_poll),
                    n => format!(
                        "{} (backing off: {n} failure{} in a row)",
                        unix_time(p.next_poll),
                        if n == 1 { "" } else { "s" }
                    ),
                };
                if p.damped_until.is_some() {
                    next = format!(
                        "{next} (damped: changes held until {})",
                        unix_time(p.damped_until)
                    );
                }
                t.add_row([
                    p.name,
                    opt(p.address),
                    p.role,
                    opt(p.dsi),
                    opt(p.index_type),
                    unix_time(p.last_poll),
                    unix_time(p.last_success),
                    opt(p.hint_age_seconds.map(ago)),
                    unix_time(p.expires),
                    opt(p.objects),
                    opt(p.values),
                    p.signature,
                    next,
                    opt(p.last_error),
                ]);
            }
            format!("{t}\n")
        }
        AdminCommand::Table { .. } => {
            let rows: Vec<TableRowInfo> = serde_json::from_value(result["rows"].clone())?;
            let mut t = table();
            t.set_header(["attribute", "value", "total", "per peer"]);
            for r in rows {
                let per_peer: Vec<String> = r
                    .peers
                    .iter()
                    .map(|(dsi, n)| format!("{dsi}: {n}"))
                    .collect();
                t.add_row([r.attr, r.value, r.total.to_string(), per_peer.join("\n")]);
            }
            format!("{t}\n")
        }
        AdminCommand::Explain { .. } => {
            let refs: Vec<ExplainInfo> = serde_json::from_value(result["referrals"].clone())?;
            if refs.is_empty() {
                return Ok("no referrals\n".to_owned());
            }
            let mut t = table();
            t.set_header(["#", "dsi", "kind", "count", "total", "matched", "why"]);
            for r in refs {
                let matched: Vec<String> = r
                    .terms
                    .iter()
                    .flat_map(|term| {
                        let head = format!(
                            "{} -> {}{}",
                            term.term,
                            term.count,
                            if term.possible { " (possible)" } else { "" }
                        );
                        std::iter::once(head).chain(
                            term.matches
                                .iter()
                                .map(|(a, v, n)| format!("  {a}={v}: {n}")),
                        )
                    })
                    .collect();
                t.add_row([
                    r.rank.to_string(),
                    format!("{}\n{}", r.dsi, r.base_uris.join("\n")),
                    if r.definite { "definite" } else { "possible" }.to_owned(),
                    r.count.to_string(),
                    r.total.to_string(),
                    matched.join("\n"),
                    r.reason,
                ]);
            }
            format!("{t}\n")
        }
        AdminCommand::Export { .. } => result["soif"].as_str().unwrap_or_default().to_owned(),
        AdminCommand::PeerHint { .. } => result["payload"].as_str().unwrap_or_default().to_owned(),
        AdminCommand::Metrics { .. } => result["text"].as_str().unwrap_or_default().to_owned(),
        AdminCommand::Poll { .. }
        | AdminCommand::Reload { .. }
        | AdminCommand::DropPeer { .. }
        | AdminCommand::LogLevel { .. }
        | AdminCommand::Shutdown { .. } => {
            format!("{}\n", result["message"].as_str().unwrap_or("done"))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn operator_messages_name_what_to_check() {
        let p = Path::new("/run/x.sock");
        let m = unreachable_message(p, &io::Error::from(io::ErrorKind::NotFound));
        assert!(
            m.contains("no admin socket at /run/x.sock") && m.contains("--socket"),
            "{m}"
        );
        let m = unreachable_message(p, &io::Error::from(io::ErrorKind::PermissionDenied));
        assert!(m.contains("0600"), "{m}");
        let m = unreachable_message(p, &io::Error::from(io::ErrorKind::ConnectionRefused));
        assert!(m.contains("not running"), "{m}");
    }

    #[test]
    fn renders_tables() {
        let r = json!({"rows": [{"attr": "DOCUMENT:Author", "value": "Garcia", "total": 5,
                                 "peers": [["1.2", 3], ["1.3", 2]]}]});
        let text = render(
            &AdminCommand::Table {
                out: Output::default(),
                attr: None,
                peer: None,
                prefix: None,
                top: 5,
            },
            &r,
        )
        .unwrap();
        assert!(text.contains("Garcia") && text.contains("1.2: 3"), "{text}");
        let text = render(
            &AdminCommand::Reload {
                out: Output::default(),
            },
            &json!({"message": "reloaded"}),
        )
        .unwrap();
        assert_eq!(text, "reloaded\n");
        assert!(
            render(
                &AdminCommand::Peers {
                    out: Output::default()
                },
                &json!({"peers": "oops"})
            )
            .is_err()
        );
    }
}
