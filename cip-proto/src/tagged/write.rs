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

/// Most tags one range may stand for when [`write_for_gatherers`] writes it tag by tag.
const MAX_EXPANDED_RANGE: u64 = 1 << 16;

/// Writes a total in the form ROADS v2.3's gatherer (`wig.pl`) reads, which is narrower
/// than RFC 2654's grammar (every form below was checked against the real program):
///
/// * index lines as `attribute:tags/value`, with no blank after the colon;
/// * tag lists as single tags (`1,2,3`), never ranges (ranges longer than
///   `MAX_EXPANDED_RANGE` tags, and `*`, are written as canonical);
/// * the template line spelled `template-type:` (the gatherer matches it in lower case), and
///   written last: the gatherer files an Index-Info under the last template it names, and
///   never stores the attribute that closes the Index-Info, so the attribute sacrificed is
///   the template line itself (already read by then).
///
/// An object holding several templates should be written one io-part per template (each a
/// total of its own records); this function writes one. Incrementals are written as
/// [`write`] does.
pub fn write_for_gatherers(index: &TaggedIndex) -> Vec<u8> {
    let Body::Total { info, last_update } = &index.body else {
        return write(index);
    };
    // The header and schema as canonical, up to the Index-Info.
    let canonical = write(&TaggedIndex {
        body: Body::Total {
            last_update: *last_update,
            info: IndexInfo::new(),
        },
        ..index.clone()
    });
    let marker: &[u8] = b"BEGIN Index-Info";
    let head_end = canonical
        .windows(marker.len())
        .rposition(|w| w == marker)
        .unwrap_or(canonical.len());
    let mut w = Writer(canonical[..head_end].to_vec());
    w.line("BEGIN Index-Info");
    let template = super::TEMPLATE_ATTRIBUTE;
    let (templates, others): (Vec<_>, Vec<_>) = info
        .attributes()
        .partition(|a| a.name().eq_ignore_ascii_case(template));
    for a in others {
        w.attribute(a.name(), a);
    }
    for a in templates {
        w.attribute(&template.to_ascii_lowercase(), a);
    }
    w.line("END Index-Info");
    w.0
}

struct Writer(Vec<u8>);

impl Writer {
    fn line(&mut self, s: &str) {
        self.0.extend_from_slice(s.as_bytes());
        self.0.extend_from_slice(b"\r\n");
    }

    /// One attribute's lines in the gatherers' form (see [`write_for_gatherers`]).
    fn attribute(&mut self, name: &str, values: &super::info::AttributeValues) {
        let mut first = true;
        for (v, t) in values.values() {
            let tags = expanded(t);
            if first {
                self.line(&format!("{name}:{tags}/{v}"));
                first = false;
            } else {
                self.line(&format!("-{tags}/{v}"));
            }
        }
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

/// A tag list with every range written tag by tag, when small enough.
fn expanded(tags: &super::TagSet) -> String {
    let small = tags
        .ranges()
        .iter()
        .map(|(a, b)| b.saturating_sub(*a).saturating_add(1))
        .try_fold(0u64, u64::checked_add)
        .is_some_and(|n| n <= MAX_EXPANDED_RANGE);
    if tags.is_all() || !small {
        return tags.to_string();
    }
    let mut out = String::new();
    for &(a, b) in tags.ranges() {
        for t in a..=b {
            if !out.is_empty() {
                out.push(',');
            }
            out.push_str(&t.to_string());
        }
    }
    out
}
