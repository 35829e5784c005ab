//! The configuration file as a TOML document, so that one check finds every problem: every
//! syntax error the parser recovers from; every key of the wrong type or unknown (each
//! found by deserializing, then taken out of the document and deserializing again);
//! and, for problems found later by key path, the line and column of that key.

use serde::de::{DeserializeOwned, IntoDeserializer};
use serde_path_to_error::Segment;
use toml::Spanned;
use toml::de::{DeTable, DeValue};

use super::validate::Problem;

/// Most problems of type or name reported for one file; past them, the check stops.
const MAX_TYPE_PROBLEMS: usize = 64;

/// What reading the document gave: the value (the raw configuration) when every remaining
/// key deserialized (the keys in `problems` left out, so their defaults apply), and the
/// problems, each with its position. `removed` are the key paths taken out, so a later
/// check can leave them alone.
pub(super) struct Read<T> {
    pub raw: Option<T>,
    pub problems: Vec<Problem>,
    pub removed: Vec<String>,
}

/// Reads `text` (see the module doc).
pub(super) fn read<T: DeserializeOwned>(text: &str) -> Read<T> {
    let (doc, errors) = DeTable::parse_recoverable(text);
    if !errors.is_empty() {
        return Read {
            raw: None,
            problems: errors
                .iter()
                .map(|e| Problem {
                    key: String::new(),
                    message: e.message().to_owned(),
                    position: e.span().map(|s| line_col(text, s.start)),
                })
                .collect(),
            removed: Vec::new(),
        };
    }
    let span = doc.span();
    let mut root = Spanned::new(span, DeValue::Table(doc.into_inner()));
    let mut problems = Vec::new();
    let mut removed = Vec::new();
    while problems.len() < MAX_TYPE_PROBLEMS {
        let de = root.clone().into_deserializer();
        match serde_path_to_error::deserialize::<_, T>(de) {
            Ok(raw) => {
                return Read {
                    raw: Some(raw),
                    problems,
                    removed,
                };
            }
            Err(e) => {
                let segments: Vec<Segment> = e.path().iter().cloned().collect();
                let key = e.path().to_string();
                let inner = e.into_inner();
                problems.push(Problem {
                    key: if key == "." {
                        String::new()
                    } else {
                        key.clone()
                    },
                    message: with_suggestion(inner.message()),
                    position: inner.span().map(|s| line_col(text, s.start)),
                });
                match remove(&mut root, &segments) {
                    Some(path) => removed.push(path),
                    // Nothing to take out: the document as a whole is wrong.
                    None => break,
                }
            }
        }
    }
    Read {
        raw: None,
        problems,
        removed,
    }
}

/// Gives each problem that has a key path but no position the line and column of that
/// key in `text` (`peer[0].port`, `listen.cip[1]`).
pub(super) fn locate(text: &str, problems: &mut [Problem]) {
    let Ok(doc) = DeTable::parse(text) else {
        return;
    };
    for p in problems.iter_mut().filter(|p| p.position.is_none()) {
        let mut table = doc.get_ref();
        let mut at = None;
        for part in p.key.split('.') {
            let (name, index) = match part.split_once('[') {
                Some((n, rest)) => (n, rest.trim_end_matches(']').parse::<usize>().ok()),
                None => (part, None),
            };
            let Some((k, v)) = table.get_key_value(name) else {
                break;
            };
            at = Some(k.span().start);
            let mut value = v;
            if let (Some(i), DeValue::Array(items)) = (index, v.get_ref())
                && let Some(item) = items.get(i)
            {
                at = Some(item.span().start);
                value = item;
            }
            match value.get_ref() {
                DeValue::Table(t) => table = t,
                _ => break,
            }
        }
        p.position = at.map(|s| line_col(text, s));
    }
}

/// Takes the key at `path` out of the document (a whole array when the path ends inside
/// one); returns its path as written, or `None` when there is nothing to take.
fn remove(root: &mut Spanned<DeValue<'_>>, path: &[Segment]) -> Option<String> {
    // The last map key on the path, and where its table is.
    let last_key = path
        .iter()
        .rposition(|s| matches!(s, Segment::Map { .. }))?;
    let mut value = root;
    let mut written = String::new();
    for segment in &path[..last_key] {
        value = match (segment, value.get_mut()) {
            (Segment::Map { key }, DeValue::Table(t)) => {
                written.push_str(if written.is_empty() { "" } else { "." });
                written.push_str(key);
                t.get_mut(key.as_str())?
            }
            (Segment::Seq { index }, DeValue::Array(a)) => {
                written.push_str(&format!("[{index}]"));
                a.get_mut(*index)?
            }
            _ => return None,
        };
    }
    let Segment::Map { key } = &path[last_key] else {
        return None;
    };
    let DeValue::Table(t) = value.get_mut() else {
        return None;
    };
    t.remove(key.as_str())?;
    written.push_str(if written.is_empty() { "" } else { "." });
    written.push_str(key);
    Some(written)
}

/// An unknown-key message with the nearest key the section knows (`unknown field
/// \`roels\`, expected one of \`name\`, \`role\`` gets "; did you mean `role`?").
fn with_suggestion(message: &str) -> String {
    let Some(rest) = message.strip_prefix("unknown field `") else {
        return message.to_owned();
    };
    let Some((given, known)) = rest.split_once('`') else {
        return message.to_owned();
    };
    let nearest = known
        .split('`')
        .skip(1)
        .step_by(2)
        .map(|k| (strsim::damerau_levenshtein(given, k), k))
        .filter(|(d, k)| *d <= (k.len() / 3).max(2))
        .min();
    match nearest {
        Some((_, k)) => format!("{message}; did you mean `{k}`?"),
        None => message.to_owned(),
    }
}

/// 1-based line and column of byte `offset` in `text`.
pub(super) fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text.as_bytes()[..offset.min(text.len())];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let col = before.iter().rev().take_while(|&&b| b != b'\n').count() + 1;
    (line, col)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions_name_the_nearest_key() {
        assert_eq!(
            with_suggestion("unknown field `roels`, expected one of `name`, `role`, `dsi`"),
            "unknown field `roels`, expected one of `name`, `role`, `dsi`; did you mean `role`?"
        );
        assert_eq!(
            with_suggestion("unknown field `zzzzzz`, expected `name` or `role`"),
            "unknown field `zzzzzz`, expected `name` or `role`"
        );
        assert_eq!(with_suggestion("invalid type"), "invalid type");
    }
}
