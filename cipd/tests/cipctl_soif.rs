//! `cipctl soif` as operators run it: output formats and exit codes on the RFC 2655 examples.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../cip-proto/tests/data")
        .join(name)
}

fn cipctl(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_cipctl"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cipctl runs");
    {
        use std::io::Write;
        let mut input = child.stdin.take().unwrap();
        input.write_all(stdin.unwrap_or_default()).unwrap();
    }
    child.wait_with_output().unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn check_reports_file_offset_message_and_exit_status() {
    let good = data("rfc2655-section6.soif");
    let bad = data("rfc2655-appendix-c.soif");
    let o = cipctl(
        &[
            "soif",
            "check",
            s(&good),
            s(&data("rfc2655-appendix-b.soif")),
        ],
        None,
    );
    assert!(o.status.success());
    assert!(o.stdout.is_empty());

    let o = cipctl(&["soif", "check", s(&good), s(&bad)], None);
    assert_eq!(o.status.code(), Some(1));
    let out = String::from_utf8(o.stdout).unwrap();
    assert_eq!(out.lines().count(), 1, "{out}");
    let expected = format!("{}:796: expected ':<TAB>' after IDENTIFIER:{{21}}", s(&bad));
    assert!(out.starts_with(&expected), "{out}");

    // Every broken object is listed, not just the first.
    let two = b"@FILE { a\nT{x}:\t1\n}\n@FILE { b\nT{1}:\t2\n}\n@FILE { c\nT{1}\t3\n}\n";
    let o = cipctl(&["soif", "check", "-"], Some(two));
    assert_eq!(o.status.code(), Some(1));
    let out = String::from_utf8(o.stdout).unwrap();
    assert_eq!(out.lines().collect::<Vec<_>>().len(), 2, "{out}");
    assert!(
        out.starts_with("<stdin>:12: non-numeric value size"),
        "{out}"
    );

    let o = cipctl(&["soif", "check", "/nonexistent/file.soif"], None);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("cannot open /nonexistent/file.soif"));
}

#[test]
fn json_is_one_object_per_line_in_order() {
    let o = cipctl(&["soif", "json", s(&data("rfc2655-section6.soif"))], None);
    assert!(o.status.success());
    let lines: Vec<serde_json::Value> = String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0]["template"], "DOCUMENT");
    assert_eq!(lines[0]["url"], "http://home.netscape.com:80/");
    assert_eq!(
        lines[0]["attributes"][0],
        serde_json::json!(["Title", "Welcome to Netscape"])
    );
    assert_eq!(
        lines[1]["attributes"][3],
        serde_json::json!(["Author-1", "Alan O. Freier"])
    );
    // The thumbnail is binary: base64.
    let thumb = lines[2]["attributes"].as_array().unwrap().last().unwrap();
    assert_eq!(thumb[0], "Thumbnail");
    assert!(thumb[1]["base64"].is_string(), "{thumb}");
}

#[test]
fn fmt_is_canonical_and_stops_at_errors() {
    let input = b"\r\n@FILE{\thttp://a/\r\nA{1}:\t1\r\n\r\n B{2}:\t22}";
    let o = cipctl(&["soif", "fmt"], Some(input));
    assert!(o.status.success());
    assert_eq!(o.stdout, b"@FILE { http://a/\nA{1}:\t1\nB{2}:\t22\n}\n\n");
    let again = cipctl(&["soif", "fmt", "-"], Some(&o.stdout));
    assert_eq!(again.stdout, o.stdout, "idempotent");

    let o = cipctl(&["soif", "fmt", s(&data("rfc2655-appendix-c.soif"))], None);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains(":796: expected ':<TAB>'"));
}

#[test]
fn a_big_file_checked_on_every_cpu_reports_what_standard_input_does() {
    // Past the size at which a file is split over threads, with broken objects on both
    // sides of the middle and values holding lines that look like objects.
    let mut input = Vec::new();
    let mut n = 0;
    while input.len() < 6 << 20 {
        let value = if n % 97 == 0 {
            format!("x\n@FILE {{ fake{n}\nT{{1}}:\ty\n}}\n")
        } else {
            format!("value {n}")
        };
        let size = if n == 1_000 || n == 60_000 {
            value.len() + 3
        } else {
            value.len()
        };
        input.extend_from_slice(
            format!("@FILE {{ http://e.org/{n}\nV{{{size}}}:\t{value}\n}}\n").as_bytes(),
        );
        n += 1;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.soif");
    std::fs::write(&path, &input).unwrap();
    let from_file = cipctl(&["soif", "check", s(&path)], None);
    let from_stdin = cipctl(&["soif", "check", "-"], Some(&input));
    assert_eq!(from_file.status.code(), Some(1));
    let file_out = String::from_utf8(from_file.stdout).unwrap();
    let stdin_out = String::from_utf8(from_stdin.stdout).unwrap();
    assert_eq!(file_out.lines().count(), 2, "{file_out}");
    assert_eq!(
        file_out.replace(s(&path), "<stdin>"),
        stdin_out,
        "the same errors at the same offsets"
    );
}
