//! Validating SOIF fast: every error listed, a file's work spread over threads.
//!
//! [`check_stream`] (any reader) and [`check_file`] (a file, on several threads) report
//! what a [`crate::soif::SoifDecoder`] fed the same bytes reports, skipping after each error to the next line that starts with `@`
//! ([`crate::soif::SoifDecoder::resync`]), but build no objects: values are jumped over by
//! their declared size, so the work is proportional to the pairs, not the bytes. Input is
//! read a window at a time (1 MiB by default, more while one object is bigger), small
//! enough to stay in the CPU's cache between the read and the scan.
//!
//! **Splitting.** A big file is cut into one region per thread at lines that start with
//! `@`, and each thread reads and checks its own region. Such a line may also sit inside a
//! value (values hold any byte), so every region but the first is a guess: its thread
//! records the offsets at which it began an object with a fresh scanner (the first
//! [`MAX_STARTS`]: enough for any cut, bounded for any file). The regions are
//! then joined in order: where the previous region's true parse stopped (its first object
//! start at or past the cut) is one of the next region's recorded starts, the next region's
//! findings from there on are exactly what a single pass would find (a fresh scanner at the
//! same offset reads the same bytes the same way), and they are taken. Otherwise (the cut
//! fell inside a value) the input is checked again, on one thread, from the true position
//! until it meets one of the recorded starts or passes the region. Answers never depend on
//! the number of threads or the window size.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;

use memchr::memmem;

use super::error::SoifError;
use super::parse::{Limits, ScanState, scan_object_at, skip_ws};

/// Inputs smaller than this are checked on one thread.
pub const PARALLEL_MIN_BYTES: u64 = 4 << 20;

/// Default window: bytes read and checked at a time.
pub const DEFAULT_WINDOW: usize = 1 << 20;

/// Object starts a region records for the join (16 bytes each); a join point past them is
/// found by checking that stretch again (tests record few, to take that path).
const MAX_STARTS: usize = if cfg!(test) { 8 } else { 1 << 16 };

/// What a check found.
#[derive(Debug, Default)]
pub struct CheckReport {
    /// Objects that parsed whole.
    pub objects: u64,
    /// Every error, in input order, offsets absolute.
    pub errors: Vec<SoifError>,
    /// Bytes checked.
    pub bytes: u64,
}

/// Checks every object `source` yields, `window` bytes at a time, on this thread.
///
/// # Errors
/// A read error of `source` (what was found before it is lost with it).
pub fn check_stream(source: impl Read, limits: &Limits, window: usize) -> io::Result<CheckReport> {
    let region = Region::check(source, 0, limits, window, false, |_| false)?;
    Ok(CheckReport {
        objects: region.objects,
        errors: region.errors.into_iter().map(|(_, e)| e).collect(),
        bytes: region.end,
    })
}

/// Checks every object of `file` (read from its start, with positional reads, on up to
/// `threads` threads when it is at least [`PARALLEL_MIN_BYTES`]).
///
/// # Errors
/// A read error (what was found before it is lost with it).
pub fn check_file(
    file: &File,
    limits: &Limits,
    threads: usize,
    window: usize,
) -> io::Result<CheckReport> {
    let len = file.metadata()?.len();
    check_at(file, len, limits, threads, window, PARALLEL_MIN_BYTES)
}

/// A source read at offsets, shared by the threads that check it.
trait ReadAt: Sync {
    fn read_at(&self, buf: &mut [u8], at: u64) -> io::Result<usize>;
}

impl ReadAt for File {
    fn read_at(&self, buf: &mut [u8], at: u64) -> io::Result<usize> {
        FileExt::read_at(self, buf, at)
    }
}

impl ReadAt for [u8] {
    fn read_at(&self, buf: &mut [u8], at: u64) -> io::Result<usize> {
        let rest = usize::try_from(at)
            .ok()
            .and_then(|at| self.get(at..))
            .unwrap_or(&[]);
        let n = rest.len().min(buf.len());
        buf[..n].copy_from_slice(&rest[..n]);
        Ok(n)
    }
}

/// A [`ReadAt`] read in order from an offset.
struct ReadFrom<'a, S: ?Sized> {
    source: &'a S,
    at: u64,
}

impl<S: ReadAt + ?Sized> Read for ReadFrom<'_, S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.source.read_at(buf, self.at)?;
        self.at += n as u64;
        Ok(n)
    }
}

/// Checks `len` bytes of `source`, split over `threads` regions when at least `min_split`.
fn check_at<S: ReadAt + ?Sized>(
    source: &S,
    len: u64,
    limits: &Limits,
    threads: usize,
    window: usize,
    min_split: u64,
) -> io::Result<CheckReport> {
    let threads = threads.clamp(1, 64);
    let cuts = if threads < 2 || len < min_split {
        Vec::new()
    } else {
        cuts(source, len, threads)?
    };
    let from = |at| ReadFrom { source, at };
    // Region k runs from cuts[k - 1] (0 for the first) to its first object start at or past
    // cuts[k] (the end for the last).
    let regions: Vec<Region> = std::thread::scope(|s| {
        let handles: Vec<_> = (1..=cuts.len())
            .map(|k| {
                let start = cuts[k - 1];
                let until = cuts.get(k).copied().unwrap_or(u64::MAX);
                s.spawn(move || {
                    Region::check(from(start), start, limits, window, true, |p| p >= until)
                })
            })
            .collect();
        let until = cuts.first().copied().unwrap_or(u64::MAX);
        let first = Region::check(from(0), 0, limits, window, false, |p| p >= until);
        std::iter::once(first)
            .chain(handles.into_iter().map(|h| {
                // A panicking scan is a bug; let it surface as the panic it is.
                h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))
            }))
            .collect::<io::Result<_>>()
    })?;
    let mut regions = regions.into_iter();
    #[allow(
        clippy::expect_used,
        reason = "the first region is always checked: it heads the list collected above"
    )]
    let first = regions.next().expect("the first region is always checked");
    let mut report = CheckReport {
        objects: first.objects,
        errors: first.errors.into_iter().map(|(_, e)| e).collect(),
        bytes: len,
    };
    // The true parse's position, and whether it stopped at a cut (else it reached the end).
    let (mut at, mut stopped) = (first.end, first.stopped);
    for region in regions {
        while stopped {
            if let Ok(i) = region.starts.binary_search_by_key(&at, |s| s.0) {
                let before = region.starts[i].1;
                let taken: Vec<SoifError> = region
                    .errors
                    .into_iter()
                    .filter(|(start, _)| *start >= at)
                    .map(|(_, e)| e)
                    .collect();
                report.objects += region.objects - before;
                report.errors.extend(taken);
                (at, stopped) = (region.end, region.stopped);
                break;
            }
            if region.stopped && at >= region.end {
                break;
            }
            // The cut fell inside a value: check again from the true position.
            let (starts, end, cut) = (&region.starts, region.end, region.stopped);
            let again = Region::check(from(at), at, limits, window, false, |p| {
                (cut && p >= end) || starts.binary_search_by_key(&p, |s| s.0).is_ok()
            })?;
            report.objects += again.objects;
            report
                .errors
                .extend(again.errors.into_iter().map(|(_, e)| e));
            (at, stopped) = (again.end, again.stopped);
        }
    }
    Ok(report)
}

/// Where to cut `len` bytes of `source` for `threads` regions: offsets of `@` at the start
/// of a line, each past the previous one.
fn cuts<S: ReadAt + ?Sized>(source: &S, len: u64, threads: usize) -> io::Result<Vec<u64>> {
    let mut cuts: Vec<u64> = Vec::with_capacity(threads - 1);
    let mut probe = vec![0u8; 64 << 10];
    'cuts: for k in 1..threads as u64 {
        let mut at = (len / threads as u64 * k).max(cuts.last().map_or(0, |&c| c + 1));
        loop {
            let n = source.read_at(&mut probe, at)?;
            if n < 2 {
                break 'cuts;
            }
            if let Some(i) = memmem::find(&probe[..n], b"\n@") {
                cuts.push(at + i as u64 + 1);
                break;
            }
            // Overlap one byte: a "\n@" may straddle two probes.
            at += n as u64 - 1;
        }
    }
    Ok(cuts)
}

/// One thread's findings over a region of a stream.
#[derive(Debug, Default)]
struct Region {
    /// Where the check ended: the object start it was told to stop at, or the end.
    end: u64,
    /// It ended at a stop (else at the end of the input).
    stopped: bool,
    /// The first [`MAX_STARTS`] offsets at which it began an object with a fresh scanner
    /// (when recorded), ascending, each with the objects it had parsed whole before it.
    starts: Vec<(u64, u64)>,
    /// Errors, each with the offset its object began at.
    errors: Vec<(u64, SoifError)>,
    /// Objects that parsed whole.
    objects: u64,
}

impl Region {
    /// Checks objects read from `source` (whose first byte is at offset `base` of the
    /// stream, between objects) until one would start at an offset `stop` accepts or the
    /// source ends, reading `window` bytes at a time.
    fn check(
        mut source: impl Read,
        mut base: u64,
        limits: &Limits,
        window: usize,
        record_starts: bool,
        mut stop: impl FnMut(u64) -> bool,
    ) -> io::Result<Self> {
        let mut region = Self::default();
        let mut window = window.max(64);
        let mut buf: Vec<u8> = Vec::with_capacity(window);
        let mut st = ScanState::new();
        // Looking for the next line that starts with `@` after an error.
        let mut resyncing = false;
        loop {
            let eof = fill(&mut source, &mut buf, window)?;
            let mut pos = 0;
            if resyncing {
                match memmem::find(&buf, b"\n@") {
                    Some(i) => {
                        resyncing = false;
                        pos = i + 1;
                    }
                    None if eof => {
                        region.end = base + buf.len() as u64;
                        return Ok(region);
                    }
                    None => {
                        // Keep the last byte: it may be the LF of a "\n@" split across reads.
                        let keep = buf.len().saturating_sub(1);
                        buf.drain(..keep);
                        base += keep as u64;
                        continue;
                    }
                }
            }
            // Scan this window's objects; `keep` is where the next window starts.
            let keep = loop {
                let at = skip_ws(&buf, pos);
                if at >= buf.len() {
                    break at;
                }
                if stop(base + at as u64) {
                    region.end = base + at as u64;
                    region.stopped = true;
                    return Ok(region);
                }
                let recorded = record_starts && region.starts.len() < MAX_STARTS;
                if recorded {
                    region.starts.push((base + at as u64, region.objects));
                }
                match scan_object_at(&buf, at, &mut st, limits, eof) {
                    Ok(Some(end)) => {
                        region.objects += 1;
                        pos = end;
                    }
                    // Part of an object: read on from its start (recorded when done).
                    Ok(None) => {
                        if recorded {
                            region.starts.pop();
                        }
                        break at;
                    }
                    Err(e) => {
                        // As `SoifDecoder::resync`: on at the next line that starts with `@`.
                        let e = e.shifted(base);
                        let from = usize::try_from(e.offset() - base)
                            .map_or(buf.len(), |o| o.min(buf.len()));
                        region.errors.push((base + at as u64, e));
                        match memmem::find(&buf[from..], b"\n@") {
                            Some(i) => pos = from + i + 1,
                            None => {
                                resyncing = true;
                                break from.min(buf.len().saturating_sub(1));
                            }
                        }
                    }
                }
            };
            if eof {
                region.end = base + buf.len() as u64;
                return Ok(region);
            }
            if keep == 0 && buf.len() >= window {
                // One object fills the window: read more of it at once (doubling, so that a
                // big object is rescanned a bounded number of times).
                window = window.saturating_mul(2);
            }
            buf.drain(..keep);
            base += keep as u64;
        }
    }
}

/// Reads from `source` until `buf` holds `window` bytes or the source ends; true at the end.
/// Reads into the buffer's spare room, which is never zeroed first.
fn fill(source: &mut impl Read, buf: &mut Vec<u8>, window: usize) -> io::Result<bool> {
    let want = window.saturating_sub(buf.len());
    if want == 0 {
        return Ok(false);
    }
    buf.reserve(want);
    let got = source.take(want as u64).read_to_end(buf)?;
    Ok(got < want)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::soif::SoifDecoder;
    use bytes::BytesMut;
    use proptest::prelude::*;
    use tokio_util::codec::Decoder;

    /// What the incremental decoder reports over `input`, resyncing after each error.
    fn decoder_says(input: &[u8], limits: Limits) -> (u64, Vec<(u64, String)>) {
        let mut dec = SoifDecoder::new(limits);
        let mut buf = BytesMut::from(input);
        let (mut objects, mut errors) = (0, Vec::new());
        loop {
            match dec.decode_eof(&mut buf) {
                Ok(Some(_)) => objects += 1,
                Ok(None) => return (objects, errors),
                Err(e) => {
                    errors.push((e.offset(), e.kind().to_string()));
                    if !dec.resync(&mut buf, e.offset()) {
                        return (objects, errors);
                    }
                }
            }
        }
    }

    /// Checks bytes in memory as a file is checked.
    fn check_bytes(input: &[u8], threads: usize) -> CheckReport {
        let len = input.len() as u64;
        check_at(
            input,
            len,
            &Limits::default(),
            threads,
            DEFAULT_WINDOW,
            PARALLEL_MIN_BYTES,
        )
        .unwrap()
    }

    fn says(report: &CheckReport) -> (u64, Vec<(u64, String)>) {
        let errors = report
            .errors
            .iter()
            .map(|e| (e.offset(), e.kind().to_string()))
            .collect();
        (report.objects, errors)
    }

    /// `objects` generated objects, some broken, some holding `\n@` lines inside values.
    fn corpus(seed: u64, objects: usize) -> Vec<u8> {
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut out = Vec::new();
        for n in 0..objects {
            out.extend_from_slice(format!("@FILE {{ http://e.org/{n}\n").as_bytes());
            for a in 0..rng.usize(0..6) {
                let value: Vec<u8> = match rng.u8(0..10) {
                    // A value that looks like the start of an object.
                    0 => format!("x\n@FILE {{ fake{n}\nT{{1}}:\ty\n}}\n").into_bytes(),
                    1 => (0..rng.usize(0..40)).map(|_| rng.u8(..)).collect(),
                    _ => format!("value {n} {a}").into_bytes(),
                };
                let mut size = value.len();
                match rng.u8(0..60) {
                    0 => size += 3,
                    1 => size = size.saturating_sub(2),
                    _ => {}
                }
                out.extend_from_slice(format!("A{a}{{{size}}}:\t").as_bytes());
                out.extend_from_slice(&value);
                out.push(b'\n');
            }
            match rng.u8(0..80) {
                0 => out.extend_from_slice(b"garbage\n"),
                1 => {}
                _ => out.extend_from_slice(b"}\n"),
            }
        }
        out
    }

    #[test]
    fn agrees_with_the_decoder_on_one_and_many_threads() {
        for seed in 0..40 {
            let input = corpus(seed, 300);
            let want = decoder_says(&input, Limits::default());
            assert!(!want.1.is_empty() || seed > 0 || want.0 > 0);
            for threads in [1, 2, 3, 7] {
                // Small inputs are never split by `check_file`; split them here.
                let report = check_split(&input, threads);
                assert_eq!(says(&report), want, "seed {seed}, {threads} threads");
            }
            assert_eq!(says(&check_bytes(&input, 2)), want);
        }
    }

    /// `check_bytes` with the size threshold ignored.
    fn check_split(input: &[u8], threads: usize) -> CheckReport {
        let len = input.len() as u64;
        check_at(input, len, &Limits::default(), threads, 64, 0).unwrap()
    }

    /// A reader that hands out at most `n` bytes per call.
    struct Trickle<'a>(&'a [u8], usize);
    impl Read for Trickle<'_> {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            let n = self.1.min(self.0.len()).min(out.len());
            out[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    #[test]
    fn a_stream_in_small_windows_agrees_with_the_decoder() {
        for seed in 0..20 {
            let input = corpus(seed, 200);
            let want = decoder_says(&input, Limits::default());
            for (window, step) in [(7, 3), (64, 1000), (200, 17), (4096, 100_000)] {
                let source = Trickle(&input, step);
                let report = check_stream(source, &Limits::default(), window).unwrap();
                assert_eq!(says(&report), want, "seed {seed}, window {window}");
                assert_eq!(report.bytes, input.len() as u64);
            }
        }
    }

    #[test]
    fn an_object_bigger_than_the_window_is_read_whole() {
        let value = "v".repeat(10_000);
        let input = format!(
            "@FILE {{ a\nT{{{}}}:\t{value}\n}}\n@FILE {{ b\n}}\n",
            value.len()
        );
        let report = check_stream(input.as_bytes(), &Limits::default(), 100).unwrap();
        assert_eq!(says(&report), (2, Vec::new()));
    }

    #[test]
    fn a_read_error_is_returned() {
        struct Broken;
        impl Read for Broken {
            fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
                Err(io::Error::other("disk on fire"))
            }
        }
        let e = check_stream(Broken, &Limits::default(), 100).unwrap_err();
        assert_eq!(e.to_string(), "disk on fire");
    }

    #[test]
    fn a_cut_inside_a_value_is_checked_again() {
        // The only "\n@" lines past the middle are inside one big value.
        let mut input = b"@FILE { a\nT{1}:\tx\n}\n".to_vec();
        let inner = "z\n@FILE { inner\nT{1}:\ty\n}\n".repeat(50);
        input.extend_from_slice(
            format!("@FILE {{ b\nV{{{}}}:\t{inner}\n}}\n", inner.len()).as_bytes(),
        );
        input.extend_from_slice(b"@FILE { c\nT{1}\tbad\n}\n@FILE { d\n}\n");
        let want = decoder_says(&input, Limits::default());
        assert_eq!(want.0, 3);
        assert_eq!(want.1.len(), 1);
        for threads in 2..6 {
            assert_eq!(
                says(&check_split(&input, threads)),
                want,
                "{threads} threads"
            );
        }
    }

    #[test]
    fn a_big_input_is_split_and_agrees() {
        let mut input = Vec::new();
        let mut seed = 100;
        while (input.len() as u64) < PARALLEL_MIN_BYTES * 2 {
            input.extend_from_slice(&corpus(seed, 2000));
            seed += 1;
        }
        assert!(!cuts(&input[..], input.len() as u64, 2).unwrap().is_empty());
        let want = decoder_says(&input, Limits::default());
        assert_eq!(says(&check_bytes(&input, 2)), want);
        assert_eq!(says(&check_bytes(&input, 4)), want);
    }

    #[test]
    fn a_file_is_split_and_agrees() {
        let input = corpus(7, 500);
        let path = std::env::temp_dir().join(format!("cip-check-{}.soif", std::process::id()));
        std::fs::write(&path, &input).unwrap();
        let file = File::open(&path).unwrap();
        let want = decoder_says(&input, Limits::default());
        for threads in 1..4 {
            let report = check_at(
                &file,
                input.len() as u64,
                &Limits::default(),
                threads,
                64,
                0,
            );
            assert_eq!(says(&report.unwrap()), want, "{threads} threads");
        }
        assert_eq!(
            says(&check_file(&file, &Limits::default(), 2, 100).unwrap()),
            want
        );
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn empty_and_blank_inputs() {
        for input in [&b""[..], b"  \n\n", b"\n@"] {
            let want = decoder_says(input, Limits::default());
            assert_eq!(says(&check_bytes(input, 2)), want);
        }
    }

    #[test]
    fn an_unfinished_object_names_its_absolute_start() {
        let input = b"@FILE { a\n}\n@FILE { b\nT{1}:\tx\n";
        let (_, errors) = decoder_says(input, Limits::default());
        assert!(errors[0].1.contains("starts at byte 12"), "{errors:?}");
        assert_eq!(says(&check_bytes(input, 1)).1, errors);
    }

    proptest! {
        #[test]
        fn any_bytes_agree_with_the_decoder(input in proptest::collection::vec(
            prop_oneof![Just(b'@'), Just(b'\n'), Just(b'{'), Just(b'}'), Just(b':'),
                Just(b'\t'), Just(b'1'), Just(b'A'), any::<u8>()], 0..400),
            threads in 1usize..5)
        {
            let want = decoder_says(&input, Limits::default());
            prop_assert_eq!(says(&check_split(&input, threads)), want.clone());
            let streamed = check_stream(Trickle(&input, 13), &Limits::default(), 32).unwrap();
            prop_assert_eq!(says(&streamed), want);
        }
    }
}
