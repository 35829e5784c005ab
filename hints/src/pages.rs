//! Big read-only buffers, on huge pages where the system allows it.
//!
//! A routing table's records and exact-match table are read at random: with 4 KiB pages
//! nearly every lookup also misses the TLB, and under virtualization a page walk costs
//! several memory accesses more. A buffer of [`HUGE_MIN`] bytes or more therefore lives in
//! an anonymous mapping advised `MADV_HUGEPAGE` (Linux; transparent huge pages set to
//! `madvise` or `always`), where 2 MiB pages cover it: written there directly
//! ([`PagesMut`]) or copied there ([`Pages::new`]). Elsewhere, or when the mapping fails,
//! the bytes stay in a vector: only speed differs.
//!
//! A build's big passing buffers ([`Scratch`]) live in mappings of their own too, on small
//! pages, so that dropping one gives its memory back at once.

use std::ops::{Deref, DerefMut};

use bytemuck::Pod;

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

/// A growable buffer of plain values for a build's passing data, held in a mapping of its
/// own once it is big ([`HUGE_MIN`] bytes), so that its memory goes back to the system the
/// moment it is dropped.
///
/// The allocator leaves returning a big freed block to its background thread (a purge of
/// over 4 MiB is deferred there), and a segment build frees hundreds of megabytes of such
/// buffers while it allocates as much again: with vectors, the import's peak depended on
/// that thread's timing (for one hint of 2,000,000 values, 1.48x to 1.98x its settled
/// memory from one run to the next). A small buffer stays a vector.
pub(crate) struct Scratch<T: Pod> {
    repr: ScratchRepr<T>,
    len: usize,
}

enum ScratchRepr<T> {
    Heap(Vec<T>),
    /// Its capacity is the mapping's length over the size of `T`.
    Mapped(memmap2::MmapMut),
}

impl<T: Pod> Default for Scratch<T> {
    fn default() -> Self {
        Self {
            repr: ScratchRepr::Heap(Vec::new()),
            len: 0,
        }
    }
}

impl<T: Pod> Scratch<T> {
    /// An empty buffer with room for `capacity` values.
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        let mut buf = Self::default();
        buf.reserve(capacity);
        buf
    }

    /// `len` copies of `value`.
    pub(crate) fn filled(len: usize, value: T) -> Self {
        let mut buf = Self::with_capacity(len);
        buf.resize(len, value);
        buf
    }

    /// Values held.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Values it holds without growing.
    pub(crate) fn capacity(&self) -> usize {
        match &self.repr {
            ScratchRepr::Heap(v) => v.capacity(),
            ScratchRepr::Mapped(map) => map.len() / std::mem::size_of::<T>().max(1),
        }
    }

    /// Makes room for `more` values past the ones held; a buffer reaching [`HUGE_MIN`]
    /// bytes moves to a mapping (of twice what it needs when it grows by one value at a
    /// time, as a vector would).
    pub(crate) fn reserve(&mut self, more: usize) {
        let need = self.len.saturating_add(more);
        if need <= self.capacity() {
            return;
        }
        let size = std::mem::size_of::<T>().max(1);
        if let ScratchRepr::Heap(v) = &mut self.repr
            && need.saturating_mul(size) < HUGE_MIN
        {
            v.reserve(more);
            return;
        }
        let cap = need.max(self.capacity().saturating_mul(2));
        // Small pages: a passing buffer is written once or twice, and huge ones would round
        // each up by as much as 2 MiB (measured: the big hint's import 1.36-1.39x with
        // them off, 1.40-1.41x on).
        let Ok(mut map) = memmap2::MmapOptions::new()
            .len(cap.saturating_mul(size))
            .map_anon()
        else {
            // No mapping: a vector does the same, only with the allocator's timing.
            let mut v = Vec::with_capacity(cap);
            v.extend_from_slice(self);
            self.repr = ScratchRepr::Heap(v);
            return;
        };
        let bytes: &[u8] = bytemuck::cast_slice(&self[..]);
        map[..bytes.len()].copy_from_slice(bytes);
        self.repr = ScratchRepr::Mapped(map);
    }

    /// Appends `value`.
    #[inline]
    pub(crate) fn push(&mut self, value: T) {
        if self.len == self.capacity() {
            self.reserve(1);
        }
        match &mut self.repr {
            ScratchRepr::Heap(v) => v.push(value),
            ScratchRepr::Mapped(map) => {
                let size = std::mem::size_of::<T>();
                map[self.len * size..(self.len + 1) * size]
                    .copy_from_slice(bytemuck::bytes_of(&value));
            }
        }
        self.len += 1;
    }

    /// Appends `values`.
    pub(crate) fn extend_from_slice(&mut self, values: &[T]) {
        self.reserve(values.len());
        match &mut self.repr {
            ScratchRepr::Heap(v) => v.extend_from_slice(values),
            ScratchRepr::Mapped(_) => {
                let at = self.len;
                self.len += values.len();
                self[at..].copy_from_slice(values);
                return;
            }
        }
        self.len += values.len();
    }

    /// Grows or shortens it to `len` values, new ones copies of `value`.
    pub(crate) fn resize(&mut self, len: usize, value: T) {
        if len <= self.len {
            self.truncate(len);
            return;
        }
        self.reserve(len - self.len);
        match &mut self.repr {
            ScratchRepr::Heap(v) => v.resize(len, value),
            ScratchRepr::Mapped(_) => {
                let at = self.len;
                self.len = len;
                self[at..].fill(value);
                return;
            }
        }
        self.len = len;
    }

    /// Keeps the first `len` values.
    pub(crate) fn truncate(&mut self, len: usize) {
        if let ScratchRepr::Heap(v) = &mut self.repr {
            v.truncate(len);
        }
        self.len = self.len.min(len);
    }
}

impl<T: Pod> Deref for Scratch<T> {
    type Target = [T];

    #[inline]
    fn deref(&self) -> &[T] {
        match &self.repr {
            ScratchRepr::Heap(v) => v,
            ScratchRepr::Mapped(map) => {
                bytemuck::cast_slice(&map[..self.len * std::mem::size_of::<T>()])
            }
        }
    }
}

impl<T: Pod> DerefMut for Scratch<T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut [T] {
        let len = self.len;
        match &mut self.repr {
            ScratchRepr::Heap(v) => v,
            ScratchRepr::Mapped(map) => {
                bytemuck::cast_slice_mut(&mut map[..len * std::mem::size_of::<T>()])
            }
        }
    }
}

impl<T: Pod> std::fmt::Debug for Scratch<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mapped = matches!(self.repr, ScratchRepr::Mapped(_));
        write!(f, "Scratch({} values, mapped: {mapped})", self.len)
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

    /// A scratch buffer reads back what was written, as a vector, across its move from
    /// the heap to a mapping and its growth there.
    #[test]
    fn scratch_buffers_hold_what_a_vector_holds() {
        let mut scratch: Scratch<u64> = Scratch::default();
        let mut want: Vec<u64> = Vec::new();
        let n = HUGE_MIN / 8 * 3 + 17;
        for i in 0..n as u64 {
            scratch.push(i * 7);
            want.push(i * 7);
        }
        assert_eq!(&scratch[..], &want[..]);
        assert!(format!("{scratch:?}").contains("mapped: true"));
        scratch.extend_from_slice(&[1, 2, 3]);
        want.extend_from_slice(&[1, 2, 3]);
        scratch.resize(n + 10, 9);
        want.resize(n + 10, 9);
        scratch[5] = 55;
        want[5] = 55;
        assert_eq!(&scratch[..], &want[..]);
        scratch.truncate(100);
        want.truncate(100);
        assert_eq!(&scratch[..], &want[..]);
        scratch.sort_unstable_by_key(|&v| std::cmp::Reverse(v));
        want.sort_unstable_by_key(|&v| std::cmp::Reverse(v));
        assert_eq!(&scratch[..], &want[..]);
        let small = Scratch::filled(10, 4u32);
        assert_eq!(&small[..], &[4u32; 10]);
        assert!(format!("{small:?}").contains("mapped: false"));
        let big = Scratch::filled(HUGE_MIN, 1u32);
        assert!(big.iter().all(|&v| v == 1) && big.len() == HUGE_MIN);
    }
}
