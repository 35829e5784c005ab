//! Reading SOIF from files and standard input in chunks, for collections and offline tools.
//!
//! Files are read 1 MiB at a time into the incremental [`SoifDecoder`], so a multi-gigabyte
//! collection needs memory for one object, not the whole file.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

use bytes::BytesMut;
use cip_proto::soif::{Limits, SoifDecoder, SoifError, SoifObject};
use tokio_util::codec::Decoder;

/// Bytes read from the source per call.
pub const CHUNK: usize = 1 << 20;

/// Iterates over the objects of a SOIF byte source.
pub struct SoifFileReader<R> {
    inner: R,
    buf: BytesMut,
    decoder: SoifDecoder,
    eof: bool,
    bytes_read: u64,
    /// Offset of the last error, until the reader has skipped past it.
    resync_from: Option<u64>,
}

/// Opens `path` for reading objects; `-` is standard input.
///
/// # Errors
/// When the file cannot be opened.
pub fn open(path: &Path, limits: Limits) -> io::Result<SoifFileReader<Box<dyn Read + Send>>> {
    let inner: Box<dyn Read + Send> = if path.as_os_str() == "-" {
        Box::new(io::stdin())
    } else {
        Box::new(File::open(path)?)
    };
    Ok(SoifFileReader::new(inner, limits))
}

impl<R: Read> SoifFileReader<R> {
    /// A reader over `inner` enforcing `limits`.
    pub fn new(inner: R, limits: Limits) -> Self {
        Self {
            inner,
            buf: BytesMut::with_capacity(CHUNK),
            decoder: SoifDecoder::new(limits),
            eof: false,
            bytes_read: 0,
            resync_from: None,
        }
    }

    /// Bytes read from the source so far (for progress reports).
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read
    }

    /// The next object; `Ok(None)` at the end.
    ///
    /// After an error the next call skips to the next line that starts with `@` and goes on
    /// from there (see [`SoifDecoder::resync`]), so callers can list every broken object.
    ///
    /// # Errors
    /// A parse error (absolute offset) or a read error.
    pub fn next_object(&mut self) -> Result<Option<SoifObject>, SoifError> {
        loop {
            if let Some(at) = self.resync_from {
                if self.decoder.resync(&mut self.buf, at) {
                    self.resync_from = None;
                } else if self.eof {
                    self.buf.clear();
                    return Ok(None);
                } else {
                    self.fill()?;
                    continue;
                }
            }
            let step = if self.eof {
                self.decoder.decode_eof(&mut self.buf)
            } else {
                self.decoder.decode(&mut self.buf)
            };
            match step {
                Ok(Some(obj)) => return Ok(Some(obj)),
                Ok(None) if self.eof => return Ok(None),
                Ok(None) => self.fill()?,
                Err(e) => {
                    self.resync_from = Some(e.offset());
                    return Err(e);
                }
            }
        }
    }

    fn fill(&mut self) -> Result<(), SoifError> {
        let start = self.buf.len();
        self.buf.resize(start + CHUNK, 0);
        let n = loop {
            match self.inner.read(&mut self.buf[start..]) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.buf.truncate(start);
                    return Err(SoifError::from(e));
                }
            }
        };
        self.buf.truncate(start + n);
        self.bytes_read += n as u64;
        if n == 0 {
            self.eof = true;
        }
        Ok(())
    }
}

impl<R: Read> Iterator for SoifFileReader<R> {
    type Item = Result<SoifObject, SoifError>;
    fn next(&mut self) -> Option<Self::Item> {
        self.next_object().transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that hands out at most `n` bytes per call, to exercise chunk boundaries.
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
    fn reads_in_small_pieces() {
        let input = b"@FILE { a\nT{3}:\tx}y\n}\n@FILE { b\n}\n";
        for step in 1..8 {
            let objs: Vec<_> = SoifFileReader::new(Trickle(input, step), Limits::default())
                .collect::<Result<_, _>>()
                .unwrap();
            assert_eq!(objs.len(), 2);
            assert_eq!(objs[0].first("T").unwrap(), "x}y");
        }
    }

    #[test]
    fn reports_each_broken_object_and_goes_on() {
        let input = b"@FILE { a\nT{x}:\t1\n}\n@FILE { b\nT{1}:\t2\n}\n@FILE { c\nT{1}\t3\n}\n@FILE { d\n}\n";
        let results: Vec<_> = SoifFileReader::new(Trickle(input, 5), Limits::default()).collect();
        let (ok, err): (Vec<_>, Vec<_>) = results.into_iter().partition(|r| r.is_ok());
        assert_eq!(ok.len(), 2);
        assert_eq!(err.len(), 2);
        assert_eq!(err[0].as_ref().unwrap_err().offset(), 12);
    }
}
