//! Big read-only buffers, on huge pages where the system allows it.
//!
//! A routing table's records and exact-match table are read at random: with 4 KiB pages
//! nearly every lookup also misses the TLB, and under virtualization a page walk costs
//! several memory accesses more. A buffer of [`HUGE_MIN`] bytes or more is therefore copied
//! into an anonymous mapping advised `MADV_HUGEPAGE` (Linux; transparent huge pages set to
//! `madvise` or `always`), where 2 MiB pages cover it. Elsewhere, or when the mapping
//! fails, the bytes stay in their vector: only speed differs.

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
    Mapped {
        map: memmap2::Mmap,
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

    /// Approximate bytes held.
    pub(crate) fn heap_bytes(&self) -> usize {
        match &self.repr {
            Repr::Empty => 0,
            Repr::Heap(v) => v.capacity(),
            Repr::Mapped { map, .. } => map.len(),
        }
    }
}

/// A read-only anonymous mapping holding a copy of `bytes`, advised onto huge pages before
/// it is written (so that the first touch of each 2 MiB allocates a huge page).
fn map_huge(bytes: &[u8]) -> std::io::Result<memmap2::Mmap> {
    let size = bytes.len().div_ceil(HUGE_PAGE) * HUGE_PAGE;
    let mut map = memmap2::MmapOptions::new().len(size).map_anon()?;
    #[cfg(target_os = "linux")]
    // Advice only: without transparent huge pages the mapping still works.
    let _ = map.advise(memmap2::Advice::HugePage);
    map[..bytes.len()].copy_from_slice(bytes);
    map.make_read_only()
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
}
