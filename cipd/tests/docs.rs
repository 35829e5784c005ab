//! Keeps the documentation's cross-references true: every relative link resolves, and every
//! configuration key the documents name exists in the example configuration.
//!
//! The documents: `README.md`, `CONTRIBUTING.md`, `CHANGELOG.md`, `ARCHITECTURE.md`,
//! `PROTOCOL.md` and every `docs/*.md`. Fenced code blocks are left out of both checks.
//!
//! **Links.** Every `[text](target)`, `![alt](target)`, `[label]: target` and HTML
//! `href="..."`/`src="..."` whose target has no scheme (`https:`, `mailto:`) must name a file
//! or directory of the repository, relative to the document (or to the repository root when
//! it starts with `/`). A `#anchor` into a Markdown file (or into the document itself) must
//! be the GitHub slug of one of its headings: the heading's text lower-cased, every
//! character other than a letter, a digit, `_`, `-` or a space dropped, spaces turned into
//! `-`, and `-1`, `-2`, ... added to repeated ones.
//!
//! **Configuration keys.** A code span (backticks) outside fenced blocks names a key when it
//! is written in one of these forms, where `section` is a top-level table (or array of
//! tables) of `deploy/cipd.toml`:
//!
//! * `section.key`, optionally followed by ` = value` (`limits.stall_timeout`,
//!   `search.stale_ttl = "0s"`), and `section.key.sub` for nested tables;
//! * `[section] key`, optionally followed by ` = value` (`[console] token`);
//! * `[section]`, `[[section]]`, `[section.key]` and `[[section.key]]` (table headers).
//!
//! A span whose first word is not such a section (`cipd.toml`, `sys.net`) is not a key, nor
//! is one that is no key and ends in a file extension (`node.key`, `search.rs`). A key
//! exists when the parsed file has it, or when the file documents it commented out under
//! its section: a line `# key = ...` after the section's header (before the next header),
//! or a commented header `# [section.key]` / `# [[section.key]]`.
//!
//! A failure lists every broken link and unknown key with its file and line.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Component, Path, PathBuf};

/// Keys the code reads that `deploy/cipd.toml` does not document yet. The documents may
/// name them; the test fails once the example documents one, so that it leaves this list.
const NOT_YET_IN_EXAMPLE: &[&str] = &[];

#[test]
fn relative_links_resolve_and_named_config_keys_exist() {
    let root = repo_root();
    let mut problems = Vec::new();
    let docs = documents(&root, &mut problems);
    assert!(
        docs.len() >= 6,
        "found only {} documents under {}",
        docs.len(),
        root.display()
    );

    let keys = ExampleKeys::read(&root.join("deploy/cipd.toml"));
    for name in NOT_YET_IN_EXAMPLE {
        if keys.paths.contains(*name) {
            problems.push(format!(
                "cipd/tests/docs.rs: deploy/cipd.toml documents `{name}` now: take it out of \
                 NOT_YET_IN_EXAMPLE"
            ));
        }
    }

    let mut parsed: BTreeMap<PathBuf, Doc> = BTreeMap::new();
    for path in &docs {
        let text = fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        parsed.insert(path.clone(), Doc::parse(&text));
    }

    let mut links = 0;
    let mut key_spans = 0;
    for (path, doc) in &parsed {
        let shown = shown(&root, path);
        for link in &doc.links {
            links += 1;
            if let Err(why) = check_link(&root, path, &link.text, &parsed) {
                problems.push(format!("{shown}:{}: link `{}` {why}", link.line, link.text));
            }
        }
        for span in &doc.code_spans {
            let Some(named) = config_reference(&span.text, &keys) else {
                continue;
            };
            key_spans += 1;
            let known = match &named {
                Named::Section(s) => keys.sections.contains(s),
                Named::Key(k) => keys.paths.contains(k) || NOT_YET_IN_EXAMPLE.contains(&&**k),
            };
            if !known && !names_a_file(&span.text) {
                let what = match named {
                    Named::Section(s) => format!("section `[{s}]`"),
                    Named::Key(k) => format!("key `{k}`"),
                };
                problems.push(format!(
                    "{shown}:{}: `{}` names the configuration {what}, which deploy/cipd.toml \
                     does not have (neither set nor as a `# key = ...` comment)",
                    span.line, span.text
                ));
            }
        }
    }
    assert!(
        links > 50,
        "found only {links} links; is the reader broken?"
    );
    assert!(
        key_spans > 50,
        "found only {key_spans} configuration keys named; is the reader broken?"
    );
    assert!(
        problems.is_empty(),
        "{} problem(s) in the documentation:\n  {}",
        problems.len(),
        problems.join("\n  ")
    );
}

/// The slug rule, on headings the documents use.
#[test]
fn github_slugs() {
    assert_eq!(
        slug("Search: the chasing proxy of RFC 2651 §4"),
        "search-the-chasing-proxy-of-rfc-2651-4"
    );
    assert_eq!(
        slug("Hina-Di 2.2 (Asahina Antenna metadata)"),
        "hina-di-22-asahina-antenna-metadata"
    );
    assert_eq!(
        slug("Operating a node: `cipctl`"),
        "operating-a-node-cipctl"
    );
    assert_eq!(
        slug("The node's own file (`GET /hina.di`)"),
        "the-nodes-own-file-get-hinadi"
    );
    assert_eq!(slug("[`max_wait`](x.md) and **more**"), "max_wait-and-more");
    let doc = Doc::parse("# A\n## A\n```\n# A\n```\n### A\n");
    assert_eq!(doc.anchors, ["a", "a-1", "a-2"].map(String::from).into());
}

#[test]
fn the_reader_finds_links_and_spans() {
    let doc = Doc::parse(
        "See [the `x`](a.md#b) and ![p](p.svg \"title\").\n\
         ```toml\n[not](checked.md)\n`limits.nope`\n```\n\
         A span over two lines: `[index]\nsummaries = false`, and `limits.stall_timeout`.\n\
         [ref]: docs/x.md\n<img src=\"y.svg\">\n",
    );
    let targets: Vec<_> = doc
        .links
        .iter()
        .map(|l| (l.line, l.text.as_str()))
        .collect();
    assert_eq!(
        targets,
        [(1, "a.md#b"), (1, "p.svg"), (8, "docs/x.md"), (9, "y.svg")]
    );
    let spans: Vec<_> = doc
        .code_spans
        .iter()
        .map(|s| (s.line, s.text.as_str()))
        .collect();
    assert_eq!(
        spans,
        [
            (1, "x"),
            (6, "[index] summaries = false"),
            (7, "limits.stall_timeout")
        ]
    );
}

/// The checks on the repository's own files: what they accept and what they refuse.
#[test]
fn the_checks_refuse_what_is_wrong() {
    let root = repo_root();
    let keys = ExampleKeys::read(&root.join("deploy/cipd.toml"));
    let known = |span: &str| match config_reference(span, &keys) {
        None => None,
        Some(Named::Section(s)) => Some(keys.sections.contains(&s)),
        Some(Named::Key(k)) => Some(keys.paths.contains(&k)),
    };
    assert_eq!(known("limits.stall_timeout"), Some(true));
    assert_eq!(known("search.stale_ttl = \"0s\""), Some(true));
    assert_eq!(
        known("[console] token"),
        Some(true),
        "commented out in its section"
    );
    assert_eq!(
        known("search.allow"),
        Some(true),
        "commented out in its section"
    );
    assert_eq!(
        known("import.index_threads"),
        Some(true),
        "commented out in its section"
    );
    assert_eq!(
        known("[[listen.cip_tls]]"),
        Some(true),
        "a commented-out header"
    );
    assert_eq!(
        known("collection.url"),
        Some(true),
        "in a commented-out [[collection]]"
    );
    assert_eq!(known("export.thresholds"), Some(true));
    assert_eq!(known("[signing]"), Some(true));
    assert_eq!(known("limits.stall_timeuot"), Some(false));
    assert_eq!(known("[index] summary"), Some(false));
    assert_eq!(known("[[peers]]"), None, "not a section: not read as one");
    assert_eq!(known("cipd.toml"), None);
    assert_eq!(known("Author=Garcia"), None);
    assert_eq!(known("node.key"), Some(false));
    assert!(names_a_file("node.key") && !names_a_file("limits.stall_timeout"));

    let parsed = BTreeMap::new();
    let readme = root.join("README.md");
    let link = |target: &str| check_link(&root, &readme, target, &parsed);
    assert_eq!(link("docs/search.md"), Ok(()));
    assert_eq!(link("docs/search.md#measured"), Ok(()));
    assert_eq!(
        link("PROTOCOL.md#search-the-chasing-proxy-of-rfc-2651-4"),
        Ok(())
    );
    assert_eq!(link("deploy/mesh"), Ok(()));
    assert_eq!(link("https://example.org/nowhere"), Ok(()));
    assert!(link("docs/nowhere.md").is_err());
    assert!(link("docs/search.md#nowhere").is_err());
    assert!(link("#nowhere").is_err());
    assert!(link("../../etc/passwd").is_err());
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("cipd/ has a parent")
        .to_path_buf()
}

/// The documents checked, each one required to exist.
fn documents(root: &Path, problems: &mut Vec<String>) -> Vec<PathBuf> {
    let mut docs = Vec::new();
    for name in [
        "README.md",
        "CONTRIBUTING.md",
        "CHANGELOG.md",
        "ARCHITECTURE.md",
        "PROTOCOL.md",
    ] {
        let path = root.join(name);
        if path.is_file() {
            docs.push(path);
        } else {
            problems.push(format!("{name} is missing"));
        }
    }
    let mut pages: Vec<PathBuf> = fs::read_dir(root.join("docs"))
        .expect("docs/ exists")
        .map(|e| e.expect("docs/ can be listed").path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    pages.sort();
    docs.extend(pages);
    docs
}

fn shown(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .display()
        .to_string()
}

/// Checks one link target found in `from`.
fn check_link(
    root: &Path,
    from: &Path,
    target: &str,
    parsed: &BTreeMap<PathBuf, Doc>,
) -> Result<(), String> {
    if has_scheme(target) {
        return Ok(());
    }
    let (path_part, anchor) = match target.split_once('#') {
        Some((p, a)) => (p, Some(a)),
        None => (target, None),
    };
    let path_part = percent_decode(path_part);
    let file = if path_part.is_empty() {
        from.to_path_buf()
    } else if let Some(abs) = path_part.strip_prefix('/') {
        root.join(abs)
    } else {
        from.parent()
            .expect("a document is in a directory")
            .join(&path_part)
    };
    let file = normalize(&file);
    if !file.starts_with(root) {
        return Err("points outside the repository".into());
    }
    if !file.exists() {
        return Err(format!(
            "names {}, which does not exist",
            shown(root, &file)
        ));
    }
    let Some(anchor) = anchor else {
        return Ok(());
    };
    if file.extension().is_none_or(|x| x != "md") {
        return Ok(());
    }
    let anchors = match parsed.get(&file) {
        Some(doc) => doc.anchors.clone(),
        None => {
            let text = fs::read_to_string(&file)
                .map_err(|e| format!("names {}, which cannot be read: {e}", file.display()))?;
            Doc::parse(&text).anchors
        }
    };
    let anchor = percent_decode(anchor);
    if anchors.contains(&anchor) {
        Ok(())
    } else {
        Err(format!(
            "names the anchor #{anchor}, which no heading of {} has",
            shown(root, &file)
        ))
    }
}

fn has_scheme(target: &str) -> bool {
    let Some((scheme, _)) = target.split_once(':') else {
        return false;
    };
    let mut chars = scheme.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || "+.-".contains(c))
}

/// `a/./b/../c` as `a/c`, without touching the file system.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(b) = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// What a document holds that the checks read.
struct Doc {
    /// Link targets.
    links: Vec<Found>,
    /// Code spans outside fenced blocks, line breaks inside them read as spaces.
    code_spans: Vec<Found>,
    /// The slugs of its headings, and `<a name>`/`id` anchors.
    anchors: BTreeSet<String>,
}

/// A link target or a code span's text, with the line it starts on (from 1).
struct Found {
    line: usize,
    text: String,
}

impl Doc {
    fn parse(text: &str) -> Doc {
        // Fenced code blocks become empty lines, so that offsets still give line numbers.
        let mut prose: Vec<&str> = Vec::new();
        let mut fence: Option<(char, usize)> = None;
        for line in text.lines() {
            let t = line.trim_start();
            let run = |c: char| t.chars().take_while(|&x| x == c).count();
            match fence {
                None => {
                    let (c, n) = if t.starts_with("```") {
                        ('`', run('`'))
                    } else if t.starts_with("~~~") {
                        ('~', run('~'))
                    } else {
                        prose.push(line);
                        continue;
                    };
                    fence = Some((c, n));
                    prose.push("");
                }
                Some((c, n)) => {
                    if run(c) >= n && t[run(c)..].trim().is_empty() {
                        fence = None;
                    }
                    prose.push("");
                }
            }
        }

        let mut anchors = BTreeSet::new();
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        for line in &prose {
            if let Some(heading) = heading(line) {
                let base = slug(heading);
                let n = seen.entry(base.clone()).or_insert(0);
                let anchor = if *n == 0 { base } else { format!("{base}-{n}") };
                *n += 1;
                anchors.insert(anchor);
            }
        }

        let joined = prose.join("\n");
        let line_of = |offset: usize| joined[..offset].matches('\n').count() + 1;
        let (code_spans, masked) = code_spans(&joined, &line_of);

        let mut links = Vec::new();
        // Inline links and images: `](target)` or `](target "title")`.
        let mut from = 0;
        while let Some(at) = masked[from..].find("](") {
            let start = from + at + 2;
            from = start;
            let rest = &masked[start..];
            let target = if let Some(inner) = rest.strip_prefix('<') {
                inner.split('>').next().unwrap_or("")
            } else {
                let mut depth = 0usize;
                let end = rest
                    .char_indices()
                    .find(|&(_, c)| match c {
                        '(' => {
                            depth += 1;
                            false
                        }
                        ')' if depth == 0 => true,
                        ')' => {
                            depth -= 1;
                            false
                        }
                        c => c.is_whitespace(),
                    })
                    .map_or(rest.len(), |(i, _)| i);
                &rest[..end]
            };
            if !target.is_empty() {
                links.push(Found {
                    line: line_of(start),
                    text: target.to_string(),
                });
            }
        }
        // HTML attributes.
        for attr in ["href=\"", "src=\""] {
            for (at, _) in masked.match_indices(attr) {
                let rest = &masked[at + attr.len()..];
                if let Some(end) = rest.find('"') {
                    links.push(Found {
                        line: line_of(at),
                        text: rest[..end].to_string(),
                    });
                }
            }
        }
        // Reference definitions: `[label]: target`.
        for (i, line) in masked.split('\n').enumerate() {
            let t = line.trim_start();
            if line.len() - t.len() > 3 || !t.starts_with('[') {
                continue;
            }
            if let Some((_, rest)) = t.split_once("]:")
                && let Some(target) = rest.split_whitespace().next()
            {
                links.push(Found {
                    line: i + 1,
                    text: target.trim_matches(['<', '>']).to_string(),
                });
            }
        }
        for attr in ["name=\"", "id=\""] {
            for (at, _) in masked.match_indices(attr) {
                let before = masked[..at].rsplit('<').next().unwrap_or("");
                if !before.starts_with('a') || before.contains('>') {
                    continue;
                }
                let rest = &masked[at + attr.len()..];
                if let Some(end) = rest.find('"') {
                    anchors.insert(rest[..end].to_string());
                }
            }
        }
        links.sort_by_key(|l| l.line);
        Doc {
            links,
            code_spans,
            anchors,
        }
    }
}

/// The text of an ATX heading (`## Text ##`), if the line is one.
fn heading(line: &str) -> Option<&str> {
    let t = line.trim_start();
    if line.len() - t.len() > 3 {
        return None;
    }
    let hashes = t.chars().take_while(|&c| c == '#').count();
    if !(1..=6).contains(&hashes) {
        return None;
    }
    let rest = &t[hashes..];
    if !rest.is_empty() && !rest.starts_with([' ', '\t']) {
        return None;
    }
    let rest = rest.trim();
    // A closing run of `#` preceded by a space is not part of the text.
    let trimmed = rest.trim_end_matches('#');
    Some(
        if trimmed.len() < rest.len() && (trimmed.is_empty() || trimmed.ends_with(' ')) {
            trimmed.trim_end()
        } else {
            rest
        },
    )
}

/// GitHub's anchor for a heading: its rendered text (code, links and emphasis reduced to
/// their text), lower-cased, with everything but letters, digits, `_`, `-` and spaces
/// dropped and spaces turned into `-`.
fn slug(heading: &str) -> String {
    // Links and images keep their text: `[text](target)` -> `text`.
    let mut text = String::new();
    let mut rest = heading;
    while let Some(open) = rest.find('[') {
        let after = &rest[open + 1..];
        match after.find("](") {
            Some(close) if after[close + 2..].contains(')') => {
                text.push_str(rest[..open].trim_end_matches('!'));
                text.push_str(&after[..close]);
                let tail = &after[close + 2..];
                rest = &tail[tail.find(')').map_or(tail.len(), |i| i + 1)..];
            }
            _ => {
                text.push_str(&rest[..=open]);
                rest = after;
            }
        }
    }
    text.push_str(rest);
    text.to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '_' || c == '-' => Some(c),
            _ => None,
        })
        .collect()
}

/// The code spans of `text` (CommonMark: a run of N backticks closed by the next run of
/// exactly N, not across a blank line), and `text` with every span blanked out.
fn code_spans(text: &str, line_of: &dyn Fn(usize) -> usize) -> (Vec<Found>, String) {
    let bytes = text.as_bytes();
    let mut masked = bytes.to_vec();
    let mut spans = Vec::new();
    let run_at = |i: usize| bytes[i..].iter().take_while(|&&b| b == b'`').count();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'`' {
            i += 1;
            continue;
        }
        let n = run_at(i);
        let open_end = i + n;
        let mut j = open_end;
        let mut close = None;
        while j < bytes.len() {
            if bytes[j] == b'`' {
                let m = run_at(j);
                if m == n {
                    close = Some(j);
                    break;
                }
                j += m;
            } else if bytes[j] == b'\n'
                && text[j + 1..]
                    .split('\n')
                    .next()
                    .is_some_and(|l| l.trim().is_empty())
            {
                break;
            } else {
                j += 1;
            }
        }
        let Some(close) = close else {
            i = open_end;
            continue;
        };
        let content = text[open_end..close].replace('\n', " ");
        spans.push(Found {
            line: line_of(i),
            text: content.trim().to_string(),
        });
        for b in &mut masked[i..close + n] {
            if *b != b'\n' {
                *b = b' ';
            }
        }
        i = close + n;
    }
    let masked = String::from_utf8(masked).expect("only ASCII bytes were replaced");
    (spans, masked)
}

/// File extensions: a span such as `node.key` or `search.rs` that ends in one and is no key
/// of the example names a file.
const FILE_EXTENSIONS: &[&str] = &[
    "css", "deb", "di", "gz", "html", "js", "json", "key", "md", "pem", "pub", "rs", "sh", "soif",
    "sock", "svg", "toml", "txt",
];

fn names_a_file(span: &str) -> bool {
    span.rsplit('.')
        .next()
        .is_some_and(|ext| FILE_EXTENSIONS.contains(&ext))
}

/// What a code span names in the configuration.
enum Named {
    Section(String),
    Key(String),
}

fn is_ident(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// A dotted path of one to three identifiers.
fn is_path(s: &str) -> bool {
    let parts: Vec<&str> = s.split('.').collect();
    parts.len() <= 3 && parts.iter().all(|p| is_ident(p))
}

/// The section or key a code span names, by the forms the module's documentation lists;
/// `None` when it names none.
fn config_reference(span: &str, keys: &ExampleKeys) -> Option<Named> {
    let t = span.trim();
    let named = if let Some(inner) = t.strip_prefix("[[") {
        let path = inner.strip_suffix("]]")?;
        is_path(path).then(|| path.to_string())?
    } else if let Some(inner) = t.strip_prefix('[') {
        let (path, after) = inner.split_once(']')?;
        if !is_path(path) {
            return None;
        }
        let after = after.trim();
        if after.is_empty() {
            path.to_string()
        } else {
            // `[section] key` or `[section] key = value`.
            let key = after.split(['=', ' ']).next()?;
            let rest = after[key.len()..].trim_start();
            if path.contains('.') || !is_ident(key) || !(rest.is_empty() || rest.starts_with('=')) {
                return None;
            }
            format!("{path}.{key}")
        }
    } else {
        // `section.key` or `section.key = value`.
        let path = t.split(['=', ' ']).next()?;
        let rest = t[path.len()..].trim_start();
        if !path.contains('.') || !is_path(path) || !(rest.is_empty() || rest.starts_with('=')) {
            return None;
        }
        path.to_string()
    };
    let section = named.split('.').next()?;
    if !keys.sections.contains(section) {
        return None;
    }
    Some(if named.contains('.') {
        Named::Key(named)
    } else {
        Named::Section(named)
    })
}

/// The sections and keys `deploy/cipd.toml` sets or documents in comments.
struct ExampleKeys {
    /// Top-level tables and arrays of tables.
    sections: BTreeSet<String>,
    /// Dotted paths of every key below them (`limits.stall_timeout`, `export.thresholds`).
    paths: BTreeSet<String>,
}

impl ExampleKeys {
    fn read(path: &Path) -> ExampleKeys {
        let text = fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        let table: toml::Table = text
            .parse()
            .unwrap_or_else(|e| panic!("{} does not parse: {e}", path.display()));
        let mut keys = ExampleKeys {
            sections: BTreeSet::new(),
            paths: BTreeSet::new(),
        };
        for (name, value) in &table {
            if value.is_table()
                || value
                    .as_array()
                    .is_some_and(|a| a.iter().all(|v| v.is_table()))
            {
                keys.sections.insert(name.clone());
                keys.add_value(name, value);
            }
        }

        // Commented-out keys and headers, under the section they follow.
        let mut section: Option<String> = None;
        let mut commented_section: Option<String> = None;
        for line in text.lines() {
            let t = line.trim();
            if let Some(header) = header_path(t) {
                section = Some(header.to_string());
                commented_section = None;
            } else if let Some(comment) = t.strip_prefix('#') {
                let c = comment.trim();
                if let Some(header) = header_path(c) {
                    keys.add_path(header);
                    commented_section = Some(header.to_string());
                } else if let Some((key, _)) = c.split_once('=') {
                    let key = key.trim();
                    let under = commented_section.as_ref().or(section.as_ref());
                    if let (true, Some(under)) = (is_ident(key), under) {
                        keys.add_path(&format!("{under}.{key}"));
                    }
                }
            }
        }
        keys
    }

    fn add_value(&mut self, path: &str, value: &toml::Value) {
        self.paths.insert(path.to_string());
        match value {
            toml::Value::Table(t) => {
                for (k, v) in t {
                    self.add_value(&format!("{path}.{k}"), v);
                }
            }
            toml::Value::Array(items) => {
                for v in items.iter().filter(|v| v.is_table()) {
                    self.add_value(path, v);
                }
            }
            _ => {}
        }
    }

    /// A path and every path above it; its first segment is a section.
    fn add_path(&mut self, path: &str) {
        let mut prefix = String::new();
        for part in path.split('.') {
            if prefix.is_empty() {
                self.sections.insert(part.to_string());
                prefix.push_str(part);
            } else {
                prefix.push('.');
                prefix.push_str(part);
            }
            self.paths.insert(prefix.clone());
        }
    }
}

/// `x.y` of a TOML header line `[x.y]` or `[[x.y]]` (a trailing comment allowed).
fn header_path(line: &str) -> Option<&str> {
    let line = line.split(" #").next()?.trim();
    let inner = match line.strip_prefix("[[") {
        Some(inner) => inner.strip_suffix("]]")?,
        None => line.strip_prefix('[')?.strip_suffix(']')?,
    };
    is_path(inner).then_some(inner)
}
