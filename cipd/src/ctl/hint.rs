//! `cipctl hint`: build and inspect CIP-HINT objects (RFC 2655 Appendix B), offline.
//!
//! * `build --attr T:A ... FILE...`: counts the values of the given attributes over SOIF
//!   collections (read in chunks, so any size) and prints the hint as canonical SOIF.
//! * `show [FILE|-]`: prints each hint's weightlists as tables, or with `--json` one line per
//!   hint: `{"T:A": {"value": count, ...}, ...}`, keys spelled as the hint spells them.
//!
//! Problems in the input are reported as `FILE:OFFSET: message` on standard error (offsets
//! are bytes from the start of the file) and give exit status 1.

use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use cip_proto::soif::{ObjectRef, SoifReader};
use clap::{Args, Subcommand};
use comfy_table::{Cell, CellAlignment, ContentArrangement, Table, presets::UTF8_FULL_CONDENSED};
use hints::builder::{HintBuilder, Thresholds};
use hints::hint::{AttrSpec, CipHint, HintError, format_date};
use serde_json::{Map, Value};

use super::soif::LimitArgs;
use super::{EXIT_INVALID_INPUT, fail};
use crate::store::soif_io;

/// The `cipctl hint` subcommands.
#[derive(Debug, Subcommand)]
pub enum HintCommand {
    /// Build a CIP-HINT from SOIF collections and print it as SOIF.
    Build(BuildArgs),
    /// Print the weightlists of CIP-HINT objects as tables (or JSON).
    Show(ShowArgs),
    /// Check a signed CIP-HINT's Ed25519 signature against the signer's public key.
    Verify(super::keys::VerifyArgs),
}

/// Arguments of `cipctl hint build`.
#[derive(Debug, Args)]
pub struct BuildArgs {
    /// An attribute to index, as Template:Attribute (matched ignoring case; `Author` also
    /// takes `Author-1`, `Author-2`, ...). Repeat for more.
    #[arg(long = "attr", value_name = "T:A", required = true, value_parser = parse_spec)]
    pub attrs: Vec<AttrSpec>,
    /// Leave out values held by fewer than N objects: `N` for every attribute, `T:A=N` for
    /// one. Repeatable; recorded in the hint as `Threshold-[T:A]` when above 1.
    #[arg(long = "threshold", value_name = "N|T:A=N", value_parser = parse_threshold)]
    pub thresholds: Vec<ThresholdArg>,
    /// URI of a service that created the indexed objects (`Source`). Repeatable.
    #[arg(long = "source", value_name = "URI")]
    pub sources: Vec<String>,
    /// The URL of the hint object: the server offering query access to the collection.
    #[arg(long, value_name = "URI", default_value = "-")]
    pub base_uri: String,
    /// Leave out `Date` (for reproducible output); by default it is the current time.
    #[arg(long)]
    pub no_date: bool,
    /// Parser limits.
    #[command(flatten)]
    pub limits: LimitArgs,
    /// SOIF collections (`-` for standard input).
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
}

/// Arguments of `cipctl hint show`.
#[derive(Debug, Args)]
pub struct ShowArgs {
    /// File of CIP-HINT objects; `-` or nothing for standard input.
    #[arg(default_value = "-", value_name = "FILE")]
    pub file: PathBuf,
    /// One JSON line per hint: `{"T:A": {"value": count, ...}, ...}`.
    #[arg(long)]
    pub json: bool,
    /// Parser limits.
    #[command(flatten)]
    pub limits: LimitArgs,
}

/// A `--threshold` flag: a default, or one attribute's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ThresholdArg {
    /// `N`: the default for attributes without their own.
    Default(u64),
    /// `T:A=N`: the threshold of one attribute.
    Attribute(AttrSpec, u64),
}

fn parse_spec(s: &str) -> Result<AttrSpec, String> {
    AttrSpec::parse(s).map_err(|e| format!("{s:?}: {e}"))
}

fn parse_threshold(s: &str) -> Result<ThresholdArg, String> {
    let number = |n: &str| {
        n.trim()
            .parse::<u64>()
            .map_err(|_| format!("{n:?} is not a non-negative whole number"))
    };
    match s.rsplit_once('=') {
        None => number(s).map(ThresholdArg::Default),
        Some((spec, n)) => Ok(ThresholdArg::Attribute(parse_spec(spec)?, number(n)?)),
    }
}

/// Runs a `cipctl hint` subcommand.
pub fn run(cmd: HintCommand) -> ExitCode {
    let mut out = BufWriter::new(io::stdout().lock());
    let mut err = io::stderr().lock();
    let result = match cmd {
        HintCommand::Build(args) => build(&args, &mut out, &mut err),
        HintCommand::Show(args) => show(&args, &mut out, &mut err),
        HintCommand::Verify(args) => Ok(super::keys::verify(&args)),
    };
    let flushed = out.flush().context("writing standard output");
    match result.and_then(|code| flushed.map(|()| code)) {
        Ok(code) => code,
        Err(e) => fail(&e),
    }
}

fn display_name(file: &Path) -> String {
    if file.as_os_str() == "-" {
        "<stdin>".to_owned()
    } else {
        file.display().to_string()
    }
}

/// `cipctl hint build`: writes the hint to `out`, problems to `err`. Nothing goes to `out`
/// when an input has errors.
///
/// # Errors
/// When a file cannot be opened or read, or output cannot be written.
pub fn build(
    args: &BuildArgs,
    out: &mut impl Write,
    err: &mut impl Write,
) -> anyhow::Result<ExitCode> {
    let mut thresholds = Thresholds::default();
    for t in &args.thresholds {
        match t {
            ThresholdArg::Default(n) => thresholds = rebase(&thresholds, *n),
            ThresholdArg::Attribute(spec, n) => {
                if !args.attrs.iter().any(|a| a.same_attribute(spec)) {
                    writeln!(
                        err,
                        "cipctl: warning: --threshold {spec}={n} names no --attr"
                    )?;
                }
                thresholds.set(spec.clone(), *n);
            }
        }
    }
    let mut builder = HintBuilder::new(args.attrs.clone(), thresholds);
    let mut bad = false;
    for file in &args.files {
        let reader = soif_io::open(file, args.limits.limits())
            .with_context(|| format!("cannot open {}", file.display()))?;
        for result in reader {
            match result {
                Ok(obj) => builder.add_object(&obj),
                Err(e) if matches!(e.kind(), cip_proto::soif::SoifErrorKind::Io(_)) => {
                    return Err(e).with_context(|| format!("cannot read {}", file.display()));
                }
                Err(e) => {
                    bad = true;
                    writeln!(err, "{}:{}: {}", display_name(file), e.offset(), e.kind())?;
                }
            }
        }
    }
    if bad {
        writeln!(err, "cipctl: no hint written: the input has errors")?;
        return Ok(ExitCode::from(EXIT_INVALID_INPUT));
    }
    let mut hint = builder.finish(args.base_uri.clone(), args.sources.clone());
    if !args.no_date {
        hint.date = Some(format_date(std::time::SystemTime::now()));
    }
    out.write_all(&hint.to_soif().to_bytes())
        .context("writing standard output")?;
    Ok(ExitCode::SUCCESS)
}

/// `thresholds` with a new default, per-attribute ones kept.
fn rebase(thresholds: &Thresholds, default: u64) -> Thresholds {
    let mut t = Thresholds::new(default);
    for (spec, n) in thresholds.per_attribute() {
        t.set(spec.clone(), *n);
    }
    t
}

/// `cipctl hint show`: tables or JSON to `out`, warnings and errors to `err`.
///
/// The input is read whole (a hint is one object, and reading it whole lets every error
/// name its exact byte offset in the file).
///
/// # Errors
/// When the file cannot be read or output cannot be written.
pub fn show(
    args: &ShowArgs,
    out: &mut impl Write,
    err: &mut impl Write,
) -> anyhow::Result<ExitCode> {
    let name = display_name(&args.file);
    let input =
        read_all(&args.file).with_context(|| format!("cannot read {}", args.file.display()))?;
    let mut bad = false;
    let mut reader = SoifReader::with_limits(&input, args.limits.limits());
    loop {
        let obj = match reader.next_object() {
            Ok(Some(obj)) => obj,
            Ok(None) => break,
            Err(e) => {
                writeln!(err, "{name}:{}: {}", e.offset(), e.kind())?;
                bad = true;
                break;
            }
        };
        match CipHint::from_soif(&obj.to_owned_object()) {
            Ok((hint, warnings)) => {
                for w in warnings {
                    writeln!(err, "{name}:{}: warning: {w}", obj.offset)?;
                }
                if args.json {
                    let (json, skipped) = hint_json(&hint);
                    for (spec, n) in skipped {
                        writeln!(
                            err,
                            "{name}:{}: warning: Weightlist-[{spec}]: {n} values are not UTF-8; \
                             left out of the JSON",
                            obj.offset
                        )?;
                    }
                    serde_json::to_writer(&mut *out, &json)?;
                    writeln!(out)?;
                } else {
                    write_tables(&hint, out)?;
                }
            }
            Err(e) => {
                bad = true;
                writeln!(err, "{name}:{}: {e}", error_offset(&input, &obj, &e))?;
            }
        }
    }
    Ok(if bad {
        ExitCode::from(EXIT_INVALID_INPUT)
    } else {
        ExitCode::SUCCESS
    })
}

fn read_all(file: &Path) -> io::Result<Vec<u8>> {
    if file.as_os_str() == "-" {
        let mut buf = Vec::new();
        io::stdin().lock().read_to_end(&mut buf)?;
        Ok(buf)
    } else {
        std::fs::read(file)
    }
}

/// The absolute file offset a hint error points at: the bad byte of the value when the error
/// names one, else the start of the attribute or of the object.
fn error_offset(input: &[u8], obj: &ObjectRef<'_>, e: &HintError) -> u64 {
    let base = input.as_ptr() as usize;
    let Some(attr) = e.attribute_index().and_then(|i| obj.attributes.get(i)) else {
        return obj.offset;
    };
    match e.value_offset() {
        // Both slices borrow from `input`, so the address difference is their offset in it.
        Some(o) => (attr.value.as_ptr() as usize - base + o) as u64,
        None => (attr.name.as_ptr() as usize - base) as u64,
    }
}

/// The JSON of one hint, and per weightlist the number of values left out for not being
/// UTF-8 (JSON keys must be text).
fn hint_json(hint: &CipHint) -> (Value, Vec<(AttrSpec, usize)>) {
    let mut root = Map::new();
    let mut skipped = Vec::new();
    for (spec, list) in &hint.weightlists {
        let key = spec.to_string();
        let entry = root.entry(key).or_insert_with(|| Value::Object(Map::new()));
        let Value::Object(values) = entry else {
            continue;
        };
        let mut not_text = 0;
        for e in list.entries() {
            match std::str::from_utf8(&e.value) {
                Ok(v) => {
                    // A value listed twice (or in a second weightlist for the same spelling)
                    // keeps its first count, as lookups do.
                    values
                        .entry(v.to_owned())
                        .or_insert_with(|| Value::from(e.count));
                }
                Err(_) => not_text += 1,
            }
        }
        if not_text > 0 {
            skipped.push((spec.clone(), not_text));
        }
    }
    (Value::Object(root), skipped)
}

/// A value as table text: UTF-8 shown as is with control characters escaped, other bytes as
/// `\xHH`.
fn printable(value: &[u8]) -> String {
    match std::str::from_utf8(value) {
        Ok(s) if !s.chars().any(char::is_control) => s.to_owned(),
        Ok(s) => s.escape_default().to_string(),
        Err(_) => value.escape_ascii().to_string(),
    }
}

fn write_tables(hint: &CipHint, out: &mut impl Write) -> io::Result<()> {
    writeln!(out, "CIP-HINT {}", hint.url)?;
    let attrs: Vec<String> = hint.attributes.iter().map(ToString::to_string).collect();
    writeln!(out, "  attributes:    {}", attrs.join(", "))?;
    for s in &hint.sources {
        writeln!(out, "  source:        {s}")?;
    }
    writeln!(out, "  objects:       {}", hint.total_object_count)?;
    if let Some(d) = &hint.date {
        writeln!(out, "  date:          {d}")?;
    }
    if let Some(t) = &hint.certification_type {
        let len = hint.certification.as_ref().map_or(0, |c| c.len());
        writeln!(out, "  certification: {t} ({len} bytes)")?;
    }
    for (spec, n) in &hint.thresholds {
        if !hint.weightlists.iter().any(|(s, _)| s == spec) {
            writeln!(out, "  threshold:     {spec} {n} (no weightlist)")?;
        }
    }
    for (spec, list) in &hint.weightlists {
        let threshold = hint
            .thresholds
            .iter()
            .find(|(s, _)| s == spec)
            .map_or_else(String::new, |(_, n)| format!(", threshold {n}"));
        writeln!(out)?;
        writeln!(
            out,
            "Weightlist-[{spec}] ({} values{threshold})",
            list.len()
        )?;
        let mut t = Table::new();
        t.load_style(UTF8_FULL_CONDENSED)
            .set_content_arrangement(ContentArrangement::Dynamic);
        t.set_header(vec![
            Cell::new("Value"),
            Cell::new("Objects").set_alignment(CellAlignment::Right),
        ]);
        for e in list.entries() {
            t.add_row(vec![
                Cell::new(printable(&e.value)),
                Cell::new(e.count).set_alignment(CellAlignment::Right),
            ]);
        }
        writeln!(out, "{t}")?;
    }
    writeln!(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(subcommand)]
        cmd: HintCommand,
    }

    fn parse(args: &[&str]) -> HintCommand {
        Cli::try_parse_from(std::iter::once("hint").chain(args.iter().copied()))
            .unwrap()
            .cmd
    }

    fn run_cmd(cmd: &HintCommand) -> (ExitCode, String, String) {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = match cmd {
            HintCommand::Build(a) => build(a, &mut out, &mut err),
            HintCommand::Show(a) => show(a, &mut out, &mut err),
            HintCommand::Verify(a) => Ok(crate::ctl::keys::verify(a)),
        }
        .unwrap();
        (
            code,
            String::from_utf8(out).unwrap(),
            String::from_utf8(err).unwrap(),
        )
    }

    const COLLECTION: &str = "@DOCUMENT { http://a/\nAuthor-1{12}:\tAldrin, Buzz\n\
        Author-2{5}:\tSmith\nTitle{1}:\tT\n}\n\
        @DOCUMENT { http://b/\nauthor{7}:\t Smith \nKeywords{4}:\tmoon\n}\n\
        @IMAGE { http://c/\nSubject{4}:\tMoon\n}\n";

    fn temp_file(dir: &tempfile::TempDir, name: &str, body: &[u8]) -> String {
        let path = dir.path().join(name);
        std::fs::write(&path, body).unwrap();
        path.to_str().unwrap().to_owned()
    }

    #[test]
    fn threshold_flags() {
        assert_eq!(parse_threshold("3"), Ok(ThresholdArg::Default(3)));
        assert_eq!(
            parse_threshold("IMAGE:Subject=10"),
            Ok(ThresholdArg::Attribute(
                AttrSpec::parse("IMAGE:Subject").unwrap(),
                10
            ))
        );
        assert!(parse_threshold("IMAGE:Subject=x").is_err());
        assert!(parse_threshold("Subject=1").is_err());
        assert!(parse_threshold("-1").is_err());
    }

    #[test]
    fn build_then_show() {
        let dir = tempfile::tempdir().unwrap();
        let file = temp_file(&dir, "c.soif", COLLECTION.as_bytes());
        let cmd = parse(&[
            "build",
            "--attr",
            "DOCUMENT:Author",
            "--attr",
            "image:subject",
            "--attr",
            "DOCUMENT:Keywords",
            "--threshold",
            "DOCUMENT:Keywords=2",
            "--source",
            "http://g/",
            "--base-uri",
            "http://broker/",
            "--no-date",
            &file,
        ]);
        let (code, out, err) = run_cmd(&cmd);
        assert_eq!(code, ExitCode::SUCCESS, "{err}");
        assert_eq!(
            out,
            "@CIP-HINT { http://broker/\n\
             Attribute-Identifier-List{49}:\tDOCUMENT:Author, image:subject, DOCUMENT:Keywords\n\
             Source{9}:\thttp://g/\n\
             Total-Object-Count{1}:\t3\n\
             Weightlist-[DOCUMENT:Author]{24}:\tSmith;2, Aldrin\\, Buzz;1\n\
             Weightlist-[image:subject]{6}:\tMoon;1\n\
             Weightlist-[DOCUMENT:Keywords]{0}:\t\n\
             Threshold-[DOCUMENT:Keywords]{1}:\t2\n\
             }\n\n"
        );
        let hint = temp_file(&dir, "h.soif", out.as_bytes());
        let (code, json, err) = run_cmd(&parse(&["show", "--json", &hint]));
        assert_eq!(code, ExitCode::SUCCESS, "{err}");
        let v: Value = serde_json::from_str(json.trim()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "DOCUMENT:Author": {"Smith": 2, "Aldrin, Buzz": 1},
                "image:subject": {"Moon": 1},
                "DOCUMENT:Keywords": {},
            })
        );
        let (code, tables, _) = run_cmd(&parse(&["show", &hint]));
        assert_eq!(code, ExitCode::SUCCESS);
        assert!(
            tables.contains("Weightlist-[DOCUMENT:Keywords] (0 values, threshold 2)"),
            "{tables}"
        );
        assert!(tables.contains("Aldrin, Buzz"), "{tables}");
        assert!(tables.contains("objects:       3"), "{tables}");
    }

    #[test]
    fn build_reports_parse_errors_and_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let good = temp_file(&dir, "good.soif", COLLECTION.as_bytes());
        let bad = temp_file(&dir, "bad.soif", b"@FILE { a\nT{x}:\t1\n}\n");
        let (code, out, err) = run_cmd(&parse(&["build", "--attr", "FILE:T", &good, &bad]));
        assert_eq!(code, ExitCode::from(EXIT_INVALID_INPUT));
        assert!(out.is_empty());
        assert!(err.starts_with(&format!("{bad}:12: ")), "{err}");
        let missing = dir.path().join("missing").to_str().unwrap().to_owned();
        let cmd = parse(&["build", "--attr", "FILE:T", &missing]);
        let HintCommand::Build(args) = cmd else {
            unreachable!()
        };
        assert!(build(&args, &mut Vec::new(), &mut Vec::new()).is_err());
    }

    #[test]
    fn show_errors_point_into_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let body =
            b"@CIP-HINT { - \nTotal-Object-Count{1}:\t1\nWeightlist-[D:A]{9}:\ta;1, b;2x\n}\n";
        let file = temp_file(&dir, "h.soif", body);
        let (code, out, err) = run_cmd(&parse(&["show", &file]));
        assert_eq!(code, ExitCode::from(EXIT_INVALID_INPUT));
        assert!(out.is_empty());
        let at = body.windows(2).position(|w| w == b"2x").unwrap();
        assert!(
            err.starts_with(&format!("{file}:{at}: Weightlist-[D:A]: byte 7: ")),
            "{err}"
        );
    }

    #[test]
    fn show_warns_and_skips_non_utf8_in_json() {
        let mut hint = CipHint {
            total_object_count: 2,
            ..CipHint::default()
        };
        let spec = AttrSpec::parse("D:A").unwrap();
        hint.weightlists.push((
            spec,
            hints::hint::Weightlist::new(vec![
                hints::hint::WeightEntry {
                    value: bytes::Bytes::from_static(b"ok"),
                    count: 2,
                },
                hints::hint::WeightEntry {
                    value: bytes::Bytes::from_static(b"\xff"),
                    count: 1,
                },
            ]),
        ));
        let dir = tempfile::tempdir().unwrap();
        let file = temp_file(&dir, "h.soif", &hint.to_soif().to_bytes());
        let (code, out, err) = run_cmd(&parse(&["show", "--json", &file]));
        assert_eq!(code, ExitCode::SUCCESS);
        assert_eq!(out, "{\"D:A\":{\"ok\":2}}\n");
        assert!(
            err.contains("warning: Weightlist-[D:A]: 1 values are not UTF-8"),
            "{err}"
        );
        assert!(err.contains("names no attribute"), "{err}");
        let (_, tables, _) = run_cmd(&parse(&["show", &file]));
        assert!(tables.contains("\\xff"), "{tables}");
    }
}
