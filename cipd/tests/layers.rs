//! Keeps `cipd/src` and `hints/src` in layers (`ARCHITECTURE.md`): every module imports
//! only from its own layer or the layers below it, and no files import each other in a
//! circle.
//!
//! The check reads the sources as text: every path that starts with `crate::`, `super::` or
//! `self::` (in `use` trees, groups included, and in code) is resolved to the module file it
//! names, test modules and comments left out. A failure names the file, the line and the path.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

/// The layers of `cipd/src`, bottom first. A module's layer is the first segment of its path.
const LAYERS: &[&str] = &[
    "sys",
    "model",
    "store",
    "transport",
    "pipeline",
    "node",
    "front",
    "daemon",
    "ctl",
];

/// The layers of `hints/src`, bottom first, each with the top-level modules in it (the map
/// in `hints/src/lib.rs`). A module's layer is the one that holds the first segment of its
/// path.
const HINTS_LAYERS: &[Layer] = &[
    ("sys", &["hasher", "pages", "threads"]),
    (
        "model",
        &["weightlist", "hint", "query", "thesaurus", "peer", "rank"],
    ),
    ("index", &["index"]),
    ("substring", &["substring"]),
    ("table", &["table"]),
    ("make", &["builder", "aggregate", "delta"]),
];

/// A layer: its name and the top-level modules in it.
type Layer = (&'static str, &'static [&'static str]);

/// One module file: its path in the crate (`["front", "http"]`) and its source.
struct Module {
    path: Vec<String>,
    text: String,
}

/// A reference from one module file to another.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Edge {
    from: String,
    to: String,
    line: usize,
    written: String,
}

#[test]
fn imports_point_down_and_form_no_circle() {
    let layers: Vec<Layer> = LAYERS
        .iter()
        .map(|l| (*l, std::slice::from_ref(l)))
        .collect();
    let problems = import_problems("src", &layers, 40, 100);
    assert!(
        problems.is_empty(),
        "imports in cipd/src must point down (see ARCHITECTURE.md):\n{}",
        problems.join("\n")
    );
}

#[test]
fn hints_imports_point_down_and_form_no_circle() {
    let problems = import_problems("../hints/src", HINTS_LAYERS, 25, 50);
    assert!(
        problems.is_empty(),
        "imports in hints/src must point down (see ARCHITECTURE.md):\n{}",
        problems.join("\n")
    );
}

/// Every import of the library under `dir` (relative to this crate) that runs up a layer
/// or leaves every layer, and every circle of files. `min_modules` and `min_edges` guard
/// the reader: fewer found means it is broken.
fn import_problems(
    dir: &str,
    layers: &[Layer],
    min_modules: usize,
    min_edges: usize,
) -> Vec<String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let modules = modules(&src);
    assert!(
        modules.len() > min_modules,
        "found only {} module files under {}",
        modules.len(),
        src.display()
    );
    let known: BTreeSet<Vec<String>> = modules.iter().map(|m| m.path.clone()).collect();
    let edges: Vec<Edge> = modules.iter().flat_map(|m| edges(m, &known)).collect();
    assert!(
        edges.len() > min_edges,
        "found only {} imports between modules under {}; is the reader broken?",
        edges.len(),
        src.display()
    );

    let mut problems = Vec::new();
    for e in &edges {
        let (from, to) = (rank(&e.from, layers), rank(&e.to, layers));
        match (from, to) {
            (Some(f), Some(t)) if t > f => problems.push(format!(
                "{} (line {}) imports `{}` from the higher layer `{}`",
                e.from, e.line, e.written, layers[t].0
            )),
            (None, _) | (_, None) if e.from != "lib" => problems.push(format!(
                "{} (line {}): `{}` is outside every layer ({})",
                e.from,
                e.line,
                e.written,
                layer_list(layers)
            )),
            _ => {}
        }
    }
    problems.extend(circle_problems(&edges));
    problems
}

/// One message per circle of files, with the imports that tie it.
fn circle_problems(edges: &[Edge]) -> Vec<String> {
    circles(edges)
        .into_iter()
        .map(|circle| {
            let ties: Vec<String> = edges
                .iter()
                .filter(|e| circle.contains(&e.from) && circle.contains(&e.to))
                .map(|e| {
                    format!(
                        "  {} (line {}) -> {}: `{}`",
                        e.from, e.line, e.to, e.written
                    )
                })
                .collect();
            format!(
                "these files import each other in a circle: {}\n{}",
                circle.iter().cloned().collect::<Vec<_>>().join(", "),
                ties.join("\n")
            )
        })
        .collect()
}

/// The layer of module `name` (`front/http`), as an index into `layers`.
fn rank(name: &str, layers: &[Layer]) -> Option<usize> {
    let top = name.split('/').next()?;
    layers.iter().position(|l| l.1.contains(&top))
}

/// The layers bottom first, as a failure names them: `sys, model, ...`, each followed by
/// its modules where they are not just the one of its name.
fn layer_list(layers: &[Layer]) -> String {
    let named: Vec<String> = layers
        .iter()
        .map(|&(name, modules)| match modules {
            [only] if *only == name => name.to_owned(),
            _ => format!("{name}: {}", modules.join(" ")),
        })
        .collect();
    named.join(", ")
}

/// Every module file of the library, test-only files (`tests.rs`) and the binaries left out.
fn modules(src: &Path) -> Vec<Module> {
    let mut out = Vec::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).expect("read the source directory") {
            let p = entry.expect("read a directory entry").path();
            if p.is_dir() {
                if p.file_name().is_some_and(|n| n != "bin") {
                    stack.push(p);
                }
                continue;
            }
            if p.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = p.strip_prefix(src).expect("below src");
            let mut path: Vec<String> = rel
                .with_extension("")
                .iter()
                .map(|s| s.to_string_lossy().into_owned())
                .collect();
            match path.last().map(String::as_str) {
                Some("main" | "tests") => continue,
                Some("mod") => {
                    path.pop();
                }
                Some("lib") if path.len() == 1 => path.clear(),
                _ => {}
            }
            let text = without_tests(&fs::read_to_string(&p).expect("read a source file"));
            out.push(Module { path, text });
        }
    }
    out
}

/// The source up to its `#[cfg(test)]` module, each line without its `//` comment (string
/// literals holding `//` are cut too, which can only hide a path, never invent one).
fn without_tests(text: &str) -> String {
    let end = text.find("#[cfg(test)]\nmod ").unwrap_or(text.len());
    text[..end]
        .lines()
        .map(|l| l.find("//").map_or(l, |i| &l[..i]))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The module name used in messages: `front/http`, or `lib` for the crate root.
fn name(path: &[String]) -> String {
    if path.is_empty() {
        "lib".to_owned()
    } else {
        path.join("/")
    }
}

/// The references from module `m` to other module files.
fn edges(m: &Module, known: &BTreeSet<Vec<String>>) -> Vec<Edge> {
    let bytes = m.text.as_bytes();
    let mut out = BTreeSet::new();
    for root in ["crate::", "super::", "self::"] {
        let mut at = 0;
        while let Some(i) = m.text[at..].find(root).map(|i| i + at) {
            at = i + root.len();
            if i > 0 && (bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_') {
                continue;
            }
            let base: Vec<String> = match root {
                "crate::" => Vec::new(),
                // `super` of a `mod.rs` is its folder's parent; of `a/b.rs`, the module `a`.
                "super::" => m.path[..m.path.len().saturating_sub(1)].to_vec(),
                _ => m.path.clone(),
            };
            let mut pos = at;
            let mut paths = Vec::new();
            tree(bytes, &mut pos, base, &mut paths);
            let line = m.text[..i].matches('\n').count() + 1;
            let written = m.text[i..pos]
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ");
            for p in paths {
                let target = resolve(&p, known);
                if target != m.path {
                    out.insert(Edge {
                        from: name(&m.path),
                        to: name(&target),
                        line,
                        written: written.clone(),
                    });
                }
            }
        }
    }
    // Paths relative to the module itself name its child modules (`use inbound::Thing`,
    // `queries::run()`), without `self::`.
    for child in known
        .iter()
        .filter(|k| k.len() == m.path.len() + 1 && k.starts_with(&m.path))
    {
        let needle = format!("{}::", child[child.len() - 1]);
        let mut at = 0;
        while let Some(i) = m.text[at..].find(&needle).map(|i| i + at) {
            at = i + needle.len();
            let before = if i > 0 { bytes[i - 1] } else { b' ' };
            if before.is_ascii_alphanumeric() || before == b'_' || before == b':' {
                continue;
            }
            out.insert(Edge {
                from: name(&m.path),
                to: name(child),
                line: m.text[..i].matches('\n').count() + 1,
                written: m.text[i..at].to_owned(),
            });
        }
    }
    out.into_iter().collect()
}

/// Reads one use tree at `pos`: `a::b`, `a::{b, c::d}`, `*`; pushes every full path.
fn tree(bytes: &[u8], pos: &mut usize, mut prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    skip_space(bytes, pos);
    if bytes.get(*pos) == Some(&b'{') {
        *pos += 1;
        loop {
            skip_space(bytes, pos);
            match bytes.get(*pos) {
                Some(b'}') => {
                    *pos += 1;
                    break;
                }
                Some(b',') => *pos += 1,
                None => break,
                _ => {
                    let before = *pos;
                    tree(bytes, pos, prefix.clone(), out);
                    if *pos == before {
                        *pos += 1;
                    }
                }
            }
        }
        return;
    }
    let start = *pos;
    while bytes
        .get(*pos)
        .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_')
    {
        *pos += 1;
    }
    let ident = String::from_utf8_lossy(&bytes[start..*pos]).into_owned();
    match ident.as_str() {
        "" => {
            out.push(prefix);
            return;
        }
        "super" => {
            prefix.pop();
        }
        "self" => {}
        _ => prefix.push(ident),
    }
    if bytes[*pos..].starts_with(b"::") {
        *pos += 2;
        tree(bytes, pos, prefix, out);
    } else {
        out.push(prefix);
    }
}

fn skip_space(bytes: &[u8], pos: &mut usize) {
    while bytes.get(*pos).is_some_and(|b| b.is_ascii_whitespace()) {
        *pos += 1;
    }
}

/// The deepest module file that `path` reaches (`front::http::ApiError` -> `front/http`).
fn resolve(path: &[String], known: &BTreeSet<Vec<String>>) -> Vec<String> {
    let mut at = Vec::new();
    for seg in path {
        let mut next = at.clone();
        next.push(seg.clone());
        if known.contains(&next) {
            at = next;
        } else {
            break;
        }
    }
    at
}

/// Every set of two or more files that reach each other (strongly connected components).
fn circles(edges: &[Edge]) -> Vec<BTreeSet<String>> {
    let mut graph: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for e in edges {
        graph.entry(&e.from).or_default().insert(&e.to);
        graph.entry(&e.to).or_default();
    }
    let reach = |start: &str| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut stack = vec![start];
        while let Some(n) = stack.pop() {
            for &t in &graph[n] {
                if seen.insert(t.to_owned()) {
                    stack.push(t);
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&str, BTreeSet<String>> = graph.keys().map(|&n| (n, reach(n))).collect();
    let mut out: Vec<BTreeSet<String>> = Vec::new();
    for &n in graph.keys() {
        if !reaches[n].contains(n) || out.iter().any(|c| c.contains(n)) {
            continue;
        }
        let circle: BTreeSet<String> = reaches[n]
            .iter()
            .filter(|m| reaches[m.as_str()].contains(n))
            .cloned()
            .collect();
        if circle.len() > 1 {
            out.push(circle);
        }
    }
    out
}
