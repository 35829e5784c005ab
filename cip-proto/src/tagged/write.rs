//! The canonical writer.

use super::info::IndexInfo;
use super::{Block, Body, TaggedIndex, VERSION};

/// Writes `index` in canonical form, which [`super::parse`] reads back to an equal value:
///
/// * CRLF line ends (RFC 2654 §4.2), no blank lines;
/// * the header in the BNF's order — `version`, `updatetype` (`total`, `incremental`, or
///   `incremental` and the mode's [`name`](super::IncrementalMode::name)), `thisupdate`,
///   `lastupdate` and `contextsize` when present — then unknown fields in order, as
///   `name: value`;
/// * `BEGIN IO-Schema`, one `attribute: TOKENTYPE` line per attribute, `END IO-Schema`;
/// * `BEGIN Index-Info` ... `END Index-Info` for a total; for an incremental, its blocks in
///   order, an Update Block as `BEGIN Old` (only when it has old lines) and `BEGIN New`
///   (always, as the BNF requires one);
/// * per attribute, `attribute: tags/value` for the first value and `-tags/value` for the
///   others; attributes in the order of their lowercased names, values in byte order; tag
///   lists as [`TagSet`](super::TagSet)'s display (`*`, or `1-3,5,7,8`: ranges for runs of
///   three or more).
///
/// Limits are not checked: an object holding a value longer than the reader's line limit
/// writes, but does not read back with the same limits.
pub fn write(index: &TaggedIndex) -> Vec<u8> {
    let mut w = Writer(Vec::with_capacity(256));
    w.line(&format!("version: {VERSION}"));
    let last_update = match &index.body {
        Body::Total { last_update, .. } => {
            w.line("updatetype: total");
            *last_update
        }
        Body::Incremental {
            mode, last_update, ..
        } => {
            match mode {
                None => w.line("updatetype: incremental"),
                Some(m) => w.line(&format!("updatetype: incremental {}", m.name())),
            }
            Some(*last_update)
        }
    };
    w.line(&format!("thisupdate: {}", index.this_update));
    if let Some(l) = last_update {
        w.line(&format!("lastupdate: {l}"));
    }
    if let Some(c) = index.context_size {
        w.line(&format!("contextsize: {c}"));
    }
    for f in &index.extra_headers {
        if f.value().is_empty() {
            w.line(&format!("{}:", f.name()));
        } else {
            w.line(&format!("{}: {}", f.name(), f.value()));
        }
    }
    w.line("BEGIN IO-Schema");
    for (a, t) in index.schema.iter() {
        w.line(&format!("{a}: {t}"));
    }
    w.line("END IO-Schema");
    match &index.body {
        Body::Total { info, .. } => w.section("Index-Info", info),
        Body::Incremental { blocks, .. } => {
            for b in blocks {
                match b {
                    Block::Add(info) => w.section("Add Block", info),
                    Block::Delete(info) => w.section("Delete Block", info),
                    Block::Update { old, new } => {
                        w.line("BEGIN Update Block");
                        if !old.is_empty() {
                            w.section("Old", old);
                        }
                        w.section("New", new);
                        w.line("END Update Block");
                    }
                }
            }
        }
    }
    w.0
}

struct Writer(Vec<u8>);

impl Writer {
    fn line(&mut self, s: &str) {
        self.0.extend_from_slice(s.as_bytes());
        self.0.extend_from_slice(b"\r\n");
    }

    fn section(&mut self, name: &str, info: &IndexInfo) {
        self.line(&format!("BEGIN {name}"));
        for a in info.attributes() {
            let mut first = true;
            for (v, t) in a.values() {
                if first {
                    self.line(&format!("{}: {t}/{v}", a.name()));
                    first = false;
                } else {
                    self.line(&format!("-{t}/{v}"));
                }
            }
        }
        self.line(&format!("END {name}"));
    }
}
