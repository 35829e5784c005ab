//! Big read-only buffers, on huge pages where the system allows it.
//!
//! A routing table's records and exact-match table are read at random: with 4 KiB pages
//! nearly every lookup also misses the TLB, and under virtualization a page walk costs
//! several memory accesses more. A buffer of [`HUGE_MIN`] bytes or more therefore lives in
//! an anonymous mapping advised `MADV_HUGEPAGE` (Linux; transparent huge pages set to
//! `madvise` or `always`), where 2 MiB pages cover it: written there directly
//! ([`PagesMut`]) or copied there ([`Pages::new`]). Elsewhere, or when the mapping fails,
//! the bytes stay in a vector: only speed differs.

use std::ops::Deref;

/// Smallest buffer worth a mapping of its own.
const HUGE_MIN: usize = 4 << 20;

/// One huge page.
const HUGE_PAGE: usize = 2 << 20;

/// Immutable bytes, perhaps on huge pages.
#[derive(Default)]
pub(crate) struct Pages {
    repr: Repr,
}

#[derive(Default)]
enum Repr {
    #[default]
    Empty,
    Heap(Vec<u8>),
    /// Left writable: no safe code can write to it through [`Pages`], and making it
    /// read-only would be one more system call that can fail.
    Mapped {
        map: memmap2::MmapMut,
        len: usize,
    },
}

impl Pages {
    /// `bytes`, moved to huge pages when big enough (else trimmed to their length).
    pub(crate) fn new(mut bytes: Vec<u8>) -> Self {
        if bytes.len() < HUGE_MIN {
            bytes.shrink_to_fit();
            return Self {
                repr: Repr::Heap(bytes),
            };
        }
        match map_huge(&bytes) {
            Ok(map) => Self {
                repr: Repr::Mapped {
                    map,
                    len: bytes.len(),
                },
            },
            Err(_) => {
                bytes.shrink_to_fit();
                Self {
                    repr: Repr::Heap(bytes),
                }
            }
        }
    }

    /// Approximate bytes held: a mapping's pages past the written length were never
    /// touched and cost no memory.
    pub(crate) fn heap_bytes(&self) -> usize {
        match &self.repr {
            Repr::Empty => 0,
            Repr::Heap(v) => v.capacity(),
            Repr::Mapped { map, len } => (len.div_ceil(HUGE_PAGE) * HUGE_PAGE).min(map.len()),
        }
    }
}

/// A buffer being written, frozen into [`Pages`] when done.
///
/// Given its size (or a bound on it) up front, a big one is written straight into its
/// huge-page mapping: building a segment then never holds its records twice (a vector,
/// then the mapping's copy), which for one hint of millions of values was a large part of
/// the import's peak memory. Pages of the mapping that are never written cost nothing, so
/// a bound is as good as the exact size. Writing past the bound still works (the bytes
/// move to a bigger buffer), only slower.
pub(crate) struct PagesMut {
    repr: MutRepr,
    len: usize,
}

enum MutRepr {
    Heap(Vec<u8>),
    Mapped(memmap2::MmapMut),
}

impl PagesMut {
    /// An empty buffer with room for `capacity` bytes.
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        let repr = if capacity >= HUGE_MIN {
            map_huge_mut(capacity).map_or_else(|_| MutRepr::Heap(Vec::new()), MutRepr::Mapped)
        } else {
            MutRepr::Heap(Vec::new())
        };
        let mut buf = Self { repr, len: 0 };
        if let MutRepr::Heap(v) = &mut buf.repr {
            v.reserve_exact(capacity);
        }
        buf
    }

    /// `len` zero bytes.
    pub(crate) fn zeroed(len: usize) -> Self {
        let mut buf = Self::with_capacity(len);
        buf.extend_zeros(len);
        buf
    }

    /// Bytes written.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Makes room for `more` bytes past the written ones.
    fn grow(&mut self, more: usize) {
        let need = self.len + more;
        match &mut self.repr {
            MutRepr::Heap(v) => v.reserve(more),
            MutRepr::Mapped(map) if need > map.len() => {
                // Past the bound: move to a buffer twice as big.
                let mut bigger = Self::with_capacity(need.max(map.len() * 2));
                bigger.extend_from_slice(&map[..self.len]);
                *self = bigger;
            }
            MutRepr::Mapped(_) => {}
        }
    }

    /// Appends `bytes`.
    #[inline]
    pub(crate) fn extend_from_slice(&mut self, bytes: &[u8]) {
        match &mut self.repr {
            MutRepr::Heap(v) => v.extend_from_slice(bytes),
            MutRepr::Mapped(map) if self.len + bytes.len() <= map.len() => {
                map[self.len..self.len + bytes.len()].copy_from_slice(bytes);
            }
            MutRepr::Mapped(_) => {
                self.grow(bytes.len());
                return self.extend_from_slice(bytes);
            }
        }
        self.len += bytes.len();
    }

    /// Appends `n` zero bytes.
    pub(crate) fn extend_zeros(&mut self, n: usize) {
        self.grow(n);
        match &mut self.repr {
            MutRepr::Heap(v) => v.resize(self.len + n, 0),
            // Written only once, front to back: bytes past `len` are still zero.
            MutRepr::Mapped(_) => {}
        }
        self.len += n;
    }

    /// The bytes written, to patch in place.
    #[inline]
    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        match &mut self.repr {
            MutRepr::Heap(v) => v,
            MutRepr::Mapped(map) => &mut map[..self.len],
        }
    }

    /// The bytes, read-only.
    pub(crate) fn freeze(self) -> Pages {
        match self.repr {
            MutRepr::Heap(v) => Pages::new(v),
            MutRepr::Mapped(map) => Pages {
                repr: Repr::Mapped { map, len: self.len },
            },
        }
    }
}

/// An anonymous mapping holding a copy of `bytes`, advised onto huge pages before it is
/// written (so that the first touch of each 2 MiB allocates a huge page).
fn map_huge(bytes: &[u8]) -> std::io::Result<memmap2::MmapMut> {
    let mut map = map_huge_mut(bytes.len())?;
    map[..bytes.len()].copy_from_slice(bytes);
    Ok(map)
}

/// A zeroed anonymous mapping of at least `len` bytes, advised onto huge pages.
fn map_huge_mut(len: usize) -> std::io::Result<memmap2::MmapMut> {
    let size = len.div_ceil(HUGE_PAGE).max(1) * HUGE_PAGE;
    let map = memmap2::MmapOptions::new().len(size).map_anon()?;
    #[cfg(target_os = "linux")]
    // Advice only: without transparent huge pages the mapping still works.
    let _ = map.advise(memmap2::Advice::HugePage);
    Ok(map)
}

impl Deref for Pages {
    type Target = [u8];

    #[inline]
    fn deref(&self) -> &[u8] {
        match &self.repr {
            Repr::Empty => &[],
            Repr::Heap(v) => v,
            Repr::Mapped { map, len } => &map[..*len],
        }
    }
}

impl std::fmt::Debug for Pages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let huge = matches!(self.repr, Repr::Mapped { .. });
        write!(f, "Pages({} bytes, mapped: {huge})", self.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_and_big_buffers_read_back() {
        let small = Pages::new(vec![1, 2, 3]);
        assert_eq!(&small[..], &[1, 2, 3]);
        let big: Vec<u8> = (0..HUGE_MIN + 12_345).map(|i| (i % 251) as u8).collect();
        let pages = Pages::new(big.clone());
        assert_eq!(&pages[..], &big[..]);
        assert!(pages.heap_bytes() >= big.len());
        assert_eq!(&Pages::default()[..], &[] as &[u8]);
    }

    #[test]
    fn written_buffers_read_back_whatever_their_bound() {
        for (bound, len) in [
            (0, 100),
            (100, 100),
            (HUGE_MIN, HUGE_MIN),
            (HUGE_MIN * 2, HUGE_MIN + 7),
            // Past the bound: the bytes move.
            (HUGE_MIN, HUGE_MIN + HUGE_PAGE + 3),
        ] {
            let want: Vec<u8> = (0..len).map(|i| (i % 253) as u8).collect();
            let mut buf = PagesMut::with_capacity(bound);
            for chunk in want.chunks(1000) {
                if chunk[0] == 0 {
                    let at = buf.len();
                    buf.extend_zeros(chunk.len());
                    buf.bytes_mut()[at..].copy_from_slice(chunk);
                } else {
                    buf.extend_from_slice(chunk);
                }
            }
            assert_eq!(buf.len(), len);
            buf.bytes_mut()[len - 1] = 7;
            let pages = buf.freeze();
            assert_eq!(
                &pages[..len - 1],
                &want[..len - 1],
                "bound {bound}, len {len}"
            );
            assert_eq!(pages[len - 1], 7);
            assert!(pages.heap_bytes() >= len);
        }
        let zeros = PagesMut::zeroed(HUGE_MIN + 1).freeze();
        assert!(zeros.iter().all(|&b| b == 0));
        assert_eq!(zeros.len(), HUGE_MIN + 1);
    }
}
