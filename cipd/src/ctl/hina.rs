//! `cipctl hina`: offline tools for Hina-Di files.
//!
//! * `check FILE...`: reads each file; one `FILE:LINE: message` line per error (warnings as
//!   `FILE:LINE: warning: message`, among them every value the spec does not allow but the
//!   reader keeps, such as a date not in RFC 1123 form), exit 1 if any error, or with
//!   `--strict` any warning.
//! * `soif [FILE|-]`: the `HINA` summary objects the daemon would index.
//! * `json [FILE|-]`: one JSON object per block, the header first.
//!
//! Problems in `soif` and `json` go to standard error in the `check` format; the exit status
//! is 1 when any of them is an error.

use std::io::{self, BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use cip_proto::hinadi::{
    self, Block, Diagnostic, Field, Header, HinaError, HinaLimits, HinaReader, Severity,
};
use clap::{Args, Subcommand};
use serde_json::{Value, json};

use super::{EXIT_INVALID_INPUT, fail};

/// The `cipctl hina` subcommands.
#[derive(Debug, Subcommand)]
pub enum HinaCommand {
    /// Check Hina-Di files; print `FILE:LINE: message` per problem, exit 1 on any error.
    Check {
        /// Files to check (`-` for standard input).
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Exit 1 on warnings too: any value the spec does not allow, even one the reader
        /// keeps.
        #[arg(long)]
        strict: bool,
        /// Reader options.
        #[command(flatten)]
        opts: ReadArgs,
    },
    /// Print each entity block as the `HINA` summary object the daemon indexes.
    Soif {
        /// Input file; `-` or nothing for standard input.
        #[arg(default_value = "-")]
        file: PathBuf,
        /// Reader options.
        #[command(flatten)]
        opts: ReadArgs,
    },
    /// Print one JSON object per block, header first:
    /// `{"block": "header"|"entity", "line", "fields": [[name, value], ...], ...}`.
    Json {
        /// Input file; `-` or nothing for standard input.
        #[arg(default_value = "-")]
        file: PathBuf,
        /// Reader options.
        #[command(flatten)]
        opts: ReadArgs,
    },
}

/// How files are read.
#[derive(Debug, Clone, Args)]
pub struct ReadArgs {
    /// Charset of files whose header declares none (the spec's default is EUC-JP).
    #[arg(long, default_value = "EUC-JP")]
    pub charset: String,
    /// Longest line accepted, in bytes.
    #[arg(long, default_value_t = 1 << 20)]
    pub max_line_bytes: usize,
}

impl ReadArgs {
    fn limits(&self) -> anyhow::Result<HinaLimits> {
        let charset = hinadi::charset(&self.charset)
            .with_context(|| format!("unknown charset {:?}", self.charset))?;
        Ok(HinaLimits {
            max_line_bytes: self.max_line_bytes,
            max_fields: usize::MAX,
            default_charset: charset,
            ..HinaLimits::default()
        })
    }
}

/// Runs a `cipctl hina` subcommand.
pub fn run(cmd: HinaCommand) -> ExitCode {
    let mut out = BufWriter::new(io::stdout().lock());
    let result = match cmd {
        HinaCommand::Check {
            files,
            strict,
            opts,
        } => opts
            .limits()
            .and_then(|l| check(&files, l, strict, &mut out)),
        HinaCommand::Soif { file, opts } => opts
            .limits()
            .and_then(|l| each(&file, l, &mut out, write_soif)),
        HinaCommand::Json { file, opts } => opts
            .limits()
            .and_then(|l| each(&file, l, &mut out, write_json)),
    };
    let flushed = out.flush().context("writing standard output");
    match result.and_then(|code| flushed.map(|()| code)) {
        Ok(code) => code,
        Err(e) => fail(&e),
    }
}

fn open(file: &Path) -> anyhow::Result<Box<dyn BufRead>> {
    Ok(if file.as_os_str() == "-" {
        Box::new(BufReader::new(io::stdin()))
    } else {
        let f =
            std::fs::File::open(file).with_context(|| format!("cannot open {}", file.display()))?;
        Box::new(BufReader::with_capacity(64 << 10, f))
    })
}

fn name(file: &Path) -> String {
    if file.as_os_str() == "-" {
        "<stdin>".into()
    } else {
        file.display().to_string()
    }
}

fn report(out: &mut dyn Write, file: &Path, d: &Diagnostic) -> io::Result<()> {
    match d.severity() {
        Severity::Error => writeln!(out, "{}:{}: {}", name(file), d.line, d.kind),
        Severity::Warning => writeln!(out, "{}:{}: warning: {}", name(file), d.line, d.kind),
    }
}

fn fatal(out: &mut dyn Write, file: &Path, e: &HinaError) -> anyhow::Result<()> {
    if let HinaError::Io { source, .. } = e {
        anyhow::bail!("cannot read {}: {source}", file.display());
    }
    // The error's own text starts with "line N: ".
    let text = e.to_string();
    let text = text
        .strip_prefix(&format!("line {}: ", e.line()))
        .unwrap_or(&text);
    writeln!(out, "{}:{}: {text}", name(file), e.line()).context("writing report")
}

/// Reads `file` to the end, handing the header and each block to `f` and each diagnostic
/// to `diag`. False when the read stopped at a fatal error (reported through `on_fatal`).
fn read(
    file: &Path,
    limits: HinaLimits,
    f: &mut dyn FnMut(Item<'_>) -> anyhow::Result<()>,
    diag: &mut dyn FnMut(&Diagnostic) -> anyhow::Result<()>,
    on_fatal: &mut dyn FnMut(&HinaError) -> anyhow::Result<()>,
) -> anyhow::Result<bool> {
    let mut reader = match HinaReader::new(open(file)?, limits) {
        Ok(r) => r,
        Err(e) => {
            on_fatal(&e)?;
            return Ok(false);
        }
    };
    for d in reader.take_diagnostics() {
        diag(&d)?;
    }
    f(Item::Header(reader.header()))?;
    loop {
        let next = reader.next_block();
        for d in reader.take_diagnostics() {
            diag(&d)?;
        }
        match next {
            Ok(Some(b)) => f(Item::Block(&b))?,
            Ok(None) => return Ok(true),
            Err(e) => {
                on_fatal(&e)?;
                return Ok(false);
            }
        }
    }
}

enum Item<'a> {
    Header(&'a Header),
    Block(&'a Block),
}

fn check(
    files: &[PathBuf],
    limits: HinaLimits,
    strict: bool,
    out: &mut impl Write,
) -> anyhow::Result<ExitCode> {
    let mut bad = false;
    for file in files {
        let mut errors = false;
        let complete = {
            let out = std::cell::RefCell::new(&mut *out);
            read(
                file,
                limits,
                &mut |_| Ok(()),
                &mut |d| {
                    errors |= strict || d.severity() == Severity::Error;
                    report(*out.borrow_mut(), file, d).context("writing report")
                },
                &mut |e| fatal(*out.borrow_mut(), file, e),
            )?
        };
        bad |= errors || !complete;
    }
    Ok(exit(bad))
}

fn exit(bad: bool) -> ExitCode {
    if bad {
        ExitCode::from(EXIT_INVALID_INPUT)
    } else {
        ExitCode::SUCCESS
    }
}

fn each(
    file: &Path,
    limits: HinaLimits,
    out: &mut impl Write,
    f: fn(Item<'_>, &mut dyn Write) -> anyhow::Result<()>,
) -> anyhow::Result<ExitCode> {
    let mut errors = false;
    let stderr = io::stderr();
    let complete = read(
        file,
        limits,
        &mut |item| f(item, out),
        &mut |d| {
            errors |= d.severity() == Severity::Error;
            report(&mut stderr.lock(), file, d).context("writing report")
        },
        &mut |e| fatal(&mut stderr.lock(), file, e),
    )?;
    Ok(exit(errors || !complete))
}

fn fields_json(fields: &[Field]) -> Value {
    Value::Array(fields.iter().map(|f| json!([f.name, f.value])).collect())
}

/// One block as the JSON `cipctl hina json` prints.
fn item_json(item: &Item<'_>) -> Value {
    match item {
        Item::Header(h) => json!({
            "block": "header",
            "line": 1,
            "version": h.version,
            "charset": h.charset.name(),
            "fields": fields_json(&h.fields),
        }),
        Item::Block(b) => json!({
            "block": "entity",
            "line": b.line,
            "url": b.url(),
            "keywords": b.keywords(),
            "fields": fields_json(&b.fields),
        }),
    }
}

fn write_json(item: Item<'_>, out: &mut dyn Write) -> anyhow::Result<()> {
    serde_json::to_writer(&mut *out, &item_json(&item))?;
    out.write_all(b"\n").context("writing standard output")
}

fn write_soif(item: Item<'_>, out: &mut dyn Write) -> anyhow::Result<()> {
    let Item::Block(b) = item else { return Ok(()) };
    match hinadi::soif::to_object(b) {
        Ok(o) => out
            .write_all(&o.to_bytes())
            .context("writing standard output"),
        Err(e) => {
            eprintln!("line {}: the block's URL cannot be a SOIF URL: {e}", b.line);
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "HINA/2.2beta\nUser-Agent: t\nContent-Type: text/plain; charset=UTF-8\n\n\
                        URL: http://a.jp/\nTitle: 日記\nKeyword: a: b\n\n\
                        URL: http://b.jp/\nTitle: x\nTitle: y\n\n\
                        URL: http://c.jp/\nLast-Modified: soon\n";

    fn opts() -> HinaLimits {
        ReadArgs {
            charset: "EUC-JP".into(),
            max_line_bytes: 1 << 20,
        }
        .limits()
        .unwrap()
    }

    #[test]
    fn values_the_spec_does_not_allow_are_warned_of_and_fail_under_strict() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("dated.di");
        std::fs::write(
            &file,
            "HINA/2.2beta\nUser-Agent: t\n\nURL: http://a/\nLast-Modified: 2001/12/05 21:30:00\n",
        )
        .unwrap();
        let mut out = Vec::new();
        let lenient = check(std::slice::from_ref(&file), opts(), false, &mut out).unwrap();
        assert_eq!(lenient, ExitCode::SUCCESS, "kept, so not an error");
        let text = String::from_utf8(std::mem::take(&mut out)).unwrap();
        let f = file.display().to_string();
        assert!(
            text.starts_with(&format!(
                "{f}:5: warning: Last-Modified: \"2001/12/05 21:30:00\" is not an RFC 1123 date"
            )),
            "{text}"
        );
        let strict = check(std::slice::from_ref(&file), opts(), true, &mut out).unwrap();
        assert_eq!(strict, ExitCode::from(EXIT_INVALID_INPUT));
    }

    #[test]
    fn check_reports_file_line_and_exits_1() {
        let dir = tempfile::tempdir().unwrap();
        let (good, bad, junk) = (
            dir.path().join("good.di"),
            dir.path().join("bad.di"),
            dir.path().join("junk.di"),
        );
        std::fs::write(&good, "HINA/2.2beta\nUser-Agent: t\n\nURL: http://a/\n").unwrap();
        std::fs::write(&bad, FILE).unwrap();
        std::fs::write(&junk, "<html>\n").unwrap();
        let mut out = Vec::new();
        assert_eq!(
            check(std::slice::from_ref(&good), opts(), false, &mut out).unwrap(),
            ExitCode::SUCCESS
        );
        assert!(out.is_empty());
        let code = check(&[good, bad.clone(), junk.clone()], opts(), false, &mut out).unwrap();
        assert_eq!(code, ExitCode::from(EXIT_INVALID_INPUT));
        let text = String::from_utf8(out).unwrap();
        let b = bad.display().to_string();
        let j = junk.display().to_string();
        assert_eq!(
            text,
            format!(
                "{b}:11: field Title repeats the one on line 10; block discarded\n\
                 {b}:14: warning: Last-Modified: \"soon\" is not an RFC 1123 date; kept as text\n\
                 {j}:1: not a Hina-Di file: expected HINA/2.2beta, found \"<html>\"\n"
            )
        );
    }

    #[test]
    fn json_has_the_header_first_then_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("a.di");
        std::fs::write(&f, FILE).unwrap();
        let mut out = Vec::new();
        let code = each(&f, opts(), &mut out, write_json).unwrap();
        assert_eq!(
            code,
            ExitCode::from(EXIT_INVALID_INPUT),
            "the duplicate is an error"
        );
        let lines: Vec<Value> = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0]["block"], "header");
        assert_eq!(lines[0]["charset"], "UTF-8");
        assert_eq!(lines[0]["fields"][0], json!(["User-Agent", "t"]));
        assert_eq!(lines[1]["url"], "http://a.jp/");
        assert_eq!(lines[1]["keywords"], json!(["a", "b"]));
        assert_eq!(lines[1]["fields"][1], json!(["Title", "日記"]));
        assert_eq!(lines[2]["line"], 13);
    }

    #[test]
    fn soif_prints_hina_objects() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("a.di");
        std::fs::write(&f, FILE).unwrap();
        let mut out = Vec::new();
        each(&f, opts(), &mut out, write_soif).unwrap();
        let objs = cip_proto::soif::parse_all(out, cip_proto::soif::Limits::default()).unwrap();
        assert_eq!(objs.len(), 2);
        assert_eq!(objs[0].template().as_str(), "HINA");
        assert_eq!(&objs[0].first("Keyword").unwrap()[..], b"a");
    }
}
