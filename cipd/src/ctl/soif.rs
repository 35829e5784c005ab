//! `cipctl soif`: offline tools for SOIF files.
//!
//! * `check FILE...`: validates; one `FILE:OFFSET: message` line per error, exit 1 if any.
//! * `json [FILE|-]`: one JSON object per summary object, in input order.
//! * `fmt [FILE|-]`: canonical SOIF.

use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use cip_proto::soif::{self, Limits, SoifObject};
use clap::{Args, Subcommand};
use serde_json::{Value, json};

use super::{EXIT_INVALID_INPUT, fail};
use crate::store::soif_io;

/// The `cipctl soif` subcommands.
#[derive(Debug, Subcommand)]
pub enum SoifCommand {
    /// Validate SOIF files; print `FILE:OFFSET: message` per error, exit 1 if any.
    Check {
        /// Files to check (`-` for standard input).
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Parser limits.
        #[command(flatten)]
        limits: LimitArgs,
    },
    /// Print each object as one line of JSON:
    /// `{"template", "url", "attributes": [[name, value], ...]}`; values that are not UTF-8
    /// appear as `{"base64": "..."}`.
    Json {
        /// Input file; `-` or nothing for standard input.
        #[arg(default_value = "-")]
        file: PathBuf,
        /// Parser limits.
        #[command(flatten)]
        limits: LimitArgs,
    },
    /// Rewrite SOIF canonically: one pair per line, exact sizes, LF line ends.
    Fmt {
        /// Input file; `-` or nothing for standard input.
        #[arg(default_value = "-")]
        file: PathBuf,
        /// Parser limits.
        #[command(flatten)]
        limits: LimitArgs,
    },
}

/// Parser limits for offline tools. Generous by default: local files are the operator's own.
#[derive(Debug, Clone, Args)]
pub struct LimitArgs {
    /// Largest value accepted, in bytes.
    #[arg(long, default_value_t = 1 << 30)]
    pub max_value_size: usize,
    /// Most attributes accepted in one object.
    #[arg(long, default_value_t = 1 << 20)]
    pub max_attributes: usize,
}

impl LimitArgs {
    /// The parser limits these flags describe.
    pub fn limits(&self) -> Limits {
        Limits {
            max_value_size: self.max_value_size,
            max_attributes: self.max_attributes,
            max_object_size: usize::MAX,
            max_token_len: 64 << 10,
        }
    }
}

/// Runs a `cipctl soif` subcommand.
pub fn run(cmd: SoifCommand) -> ExitCode {
    let stdout = io::stdout().lock();
    let mut out = BufWriter::new(stdout);
    let result = match cmd {
        SoifCommand::Check { files, limits } => check(&files, limits.limits(), &mut out),
        SoifCommand::Json { file, limits } => each(&file, limits.limits(), &mut out, write_json),
        SoifCommand::Fmt { file, limits } => each(&file, limits.limits(), &mut out, write_soif),
    };
    let flushed = out.flush().context("writing standard output");
    match result.and_then(|code| flushed.map(|()| code)) {
        Ok(code) => code,
        Err(e) => fail(&e),
    }
}

/// Checks each file on every CPU ([`soif::check_file`]: no objects built, values jumped over
/// by their size), standard input on one, listing every error.
fn check(files: &[PathBuf], limits: Limits, out: &mut impl Write) -> anyhow::Result<ExitCode> {
    let mut bad = false;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    for file in files {
        let checked = if file.as_os_str() == "-" {
            soif::check_stream(io::stdin().lock(), &limits, soif::DEFAULT_WINDOW)
                .context("reading standard input")?
        } else {
            let f = std::fs::File::open(file)
                .with_context(|| format!("cannot open {}", file.display()))?;
            soif::check_file(&f, &limits, threads, soif::DEFAULT_WINDOW)
                .with_context(|| format!("reading {}", file.display()))?
        };
        bad |= !checked.errors.is_empty();
        for e in &checked.errors {
            report(out, file, e)?;
        }
    }
    Ok(if bad {
        ExitCode::from(EXIT_INVALID_INPUT)
    } else {
        ExitCode::SUCCESS
    })
}

/// Runs `f` on every object of `file`; stops at the first parse error, reports it and exits 1.
fn each(
    file: &Path,
    limits: Limits,
    out: &mut impl Write,
    f: fn(&SoifObject, &mut dyn Write) -> io::Result<()>,
) -> anyhow::Result<ExitCode> {
    let mut reader =
        soif_io::open(file, limits).with_context(|| format!("cannot open {}", file.display()))?;
    loop {
        match reader.next_object() {
            Ok(Some(obj)) => f(&obj, out).context("writing standard output")?,
            Ok(None) => return Ok(ExitCode::SUCCESS),
            Err(e) => {
                out.flush().context("writing standard output")?;
                report(&mut io::stderr().lock(), file, &e)?;
                return Ok(ExitCode::from(EXIT_INVALID_INPUT));
            }
        }
    }
}

fn report(out: &mut impl Write, file: &Path, e: &cip_proto::SoifError) -> anyhow::Result<()> {
    let name = if file.as_os_str() == "-" {
        "<stdin>".into()
    } else {
        file.display().to_string()
    };
    writeln!(out, "{name}:{}: {}", e.offset(), e.kind()).context("writing report")
}

/// A byte string as JSON: a string when UTF-8, else `{"base64": ...}`.
pub fn bytes_json(bytes: &[u8]) -> Value {
    match std::str::from_utf8(bytes) {
        Ok(s) => Value::String(s.to_owned()),
        Err(_) => json!({ "base64": cip_proto::base64::encode_line(bytes) }),
    }
}

/// One object as the JSON `cipctl soif json` prints.
pub fn object_json(obj: &SoifObject) -> Value {
    let attributes: Vec<Value> = obj
        .attributes
        .iter()
        .map(|a| json!([a.name.as_str(), bytes_json(&a.value)]))
        .collect();
    json!({
        "template": obj.template().as_str(),
        "url": bytes_json(obj.url()),
        "attributes": attributes,
    })
}

fn write_json(obj: &SoifObject, out: &mut dyn Write) -> io::Result<()> {
    serde_json::to_writer(&mut *out, &object_json(obj))?;
    out.write_all(b"\n")
}

fn write_soif(obj: &SoifObject, out: &mut dyn Write) -> io::Result<()> {
    out.write_all(&obj.to_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_shape() {
        let mut o = SoifObject::new("DOCUMENT", "http://x/").unwrap();
        o.push("Title", "T")
            .unwrap()
            .push("Bin", vec![0xffu8, 0])
            .unwrap();
        let v = object_json(&o);
        assert_eq!(
            v,
            json!({"template": "DOCUMENT", "url": "http://x/",
                   "attributes": [["Title", "T"], ["Bin", {"base64": "/wA="}]]})
        );
    }
}
