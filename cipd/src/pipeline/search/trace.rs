//! W3C Trace Context (`traceparent`) for searches: one trace id follows a search through
//! every node it reaches, so each node's log lines of that search can be found by it.
//!
//! `traceparent: 00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>`. A request that
//! brings a valid one joins its trace; otherwise a new trace starts. Each sub-request gets
//! the same trace id and a new parent id.

/// The HTTP header.
pub const HEADER: &str = "traceparent";

/// A search's place in a trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    /// 32 lower-case hex digits, not all zero.
    pub trace_id: String,
    /// The id of the span (request) that asked this node: 16 hex digits.
    pub parent_id: String,
    /// Trace flags (`01`: sampled).
    pub flags: u8,
}

fn random_hex(bytes: usize) -> String {
    let mut raw = vec![0u8; bytes];
    // Ids need only be unlikely to repeat; fall back to a weaker source if the OS has none.
    if getrandom::getrandom(&mut raw).is_err() {
        for b in &mut raw {
            *b = fastrand::u8(..);
        }
    }
    if raw.iter().all(|b| *b == 0) {
        raw[bytes - 1] = 1;
    }
    raw.iter().map(|b| format!("{b:02x}")).collect()
}

fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

impl TraceContext {
    /// A new trace.
    pub fn new() -> Self {
        Self {
            trace_id: random_hex(16),
            parent_id: random_hex(8),
            flags: 1,
        }
    }

    /// The context a `traceparent` value names, when it is valid (version `00`, or a later
    /// version read as `00`, as the spec asks); `None` otherwise.
    pub fn parse(value: &str) -> Option<Self> {
        let mut parts = value.trim().split('-');
        let version = parts.next()?;
        let (trace_id, parent_id, flags) = (parts.next()?, parts.next()?, parts.next()?);
        let extra = parts.next().is_some();
        if !is_hex(version, 2) || version == "ff" || (version == "00" && extra) {
            return None;
        }
        if !is_hex(trace_id, 32) || trace_id.bytes().all(|b| b == b'0') {
            return None;
        }
        if !is_hex(parent_id, 16) || parent_id.bytes().all(|b| b == b'0') || !is_hex(flags, 2) {
            return None;
        }
        Some(Self {
            trace_id: trace_id.to_owned(),
            parent_id: parent_id.to_owned(),
            flags: u8::from_str_radix(flags, 16).ok()?,
        })
    }

    /// The `traceparent` value for a sub-request of this search (same trace, new span).
    pub fn child(&self) -> String {
        format!("00-{}-{}-{:02x}", self.trace_id, random_hex(8), self.flags)
    }
}

impl Default for TraceContext {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_spec_example_and_refuses_bad_ones() {
        let t =
            TraceContext::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap();
        assert_eq!(t.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(t.parent_id, "00f067aa0ba902b7");
        assert_eq!(t.flags, 1);
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
        ] {
            assert!(TraceContext::parse(bad).is_none(), "{bad:?}");
        }
        // A later version with more fields is read as version 00.
        assert!(
            TraceContext::parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x")
                .is_some()
        );
    }

    #[test]
    fn children_keep_the_trace() {
        let t = TraceContext::new();
        let c = TraceContext::parse(&t.child()).unwrap();
        assert_eq!(c.trace_id, t.trace_id);
        assert_ne!(c.parent_id, t.parent_id);
        assert_eq!(
            TraceContext::parse(&format!("00-{}-{}-01", t.trace_id, t.parent_id)),
            Some(t)
        );
    }
}
