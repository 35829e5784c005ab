//! Big buffers allocated so that their memory goes back to the system soon after they are
//! freed.
//!
//! The daemon's allocator (jemalloc, `cipd/src/main.rs`) serves an allocation of [`BIG`]
//! bytes or more from an arena of its own that keeps no freed pages for reuse
//! (`oversize_threshold`, `.cargo/config.toml`); its background thread returns them to the
//! system soon after (how soon, measured: `docs/sizing.md`, "Process memory"). That is not
//! at once: code that must not hold a big buffer twice even briefly writes into a mapping of
//! its own, as the routing table's segment builders do. Other arenas keep freed pages for
//! `dirty_decay_ms` (`.cargo/config.toml`), in case they are wanted again, which suits the
//! many small buffers of queries. A buffer *grown* past [`BIG`] by reallocation stays in the
//! arena its first, small allocation came from: a 64 MiB receive buffer, freed once its
//! hint was parsed, then still counted while the import built the hint's segment. Growing
//! past [`BIG`] with a fresh allocation ([`reserve`]) puts the buffer where it belongs.

use bytes::BytesMut;

/// The allocator's threshold for its own arena of big allocations (jemalloc's
/// `oversize_threshold`, 8 MiB, set explicitly in `.cargo/config.toml`).
pub const BIG: usize = 8 << 20;

/// Reserves room for `more` bytes in `buf`, like [`BytesMut::reserve`]; a buffer growing
/// from below [`BIG`] to [`BIG`] or more is moved to a fresh allocation of its new size
/// (one copy, as a reallocation would make).
pub fn reserve(buf: &mut BytesMut, more: usize) {
    let want = buf.len().saturating_add(more);
    if buf.capacity() < BIG && want >= BIG {
        let mut fresh = BytesMut::with_capacity(want);
        fresh.extend_from_slice(buf);
        *buf = fresh;
    } else {
        buf.reserve(more);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growing_past_the_threshold_keeps_the_bytes() {
        let mut buf = BytesMut::from(&b"head"[..]);
        reserve(&mut buf, 10);
        assert!(buf.capacity() >= 14);
        reserve(&mut buf, BIG);
        assert!(buf.capacity() >= BIG + 4);
        assert_eq!(&buf[..], b"head");
        buf.extend_from_slice(b" and more");
        reserve(&mut buf, BIG);
        assert_eq!(&buf[..], b"head and more");
        assert!(buf.capacity() >= BIG + 13);
    }
}
