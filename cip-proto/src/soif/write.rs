//! Canonical SOIF output: `@TEMPLATE { URL`, one `Name{size}:<TAB>value` pair per line,
//! `}` and a blank line, LF line ends. The parser reads it back to an equal object.

use bytes::{BufMut, BytesMut};
use tokio_util::codec::Encoder;

use super::SoifObject;
use super::error::SoifError;
use super::parse::ObjectRef;

/// Appends `obj` as canonical SOIF to `out`.
pub fn write_object(obj: &SoifObject, out: &mut Vec<u8>) {
    out.reserve(encoded_len(obj));
    write_header(out, obj.template().as_bytes(), obj.url());
    for a in &obj.attributes {
        write_pair(out, a.name.as_bytes(), &a.value);
    }
    out.extend_from_slice(b"}\n\n");
}

/// Appends a borrowed object as canonical SOIF to `out`.
pub fn write_object_ref(obj: &ObjectRef<'_>, out: &mut Vec<u8>) {
    write_header(out, obj.template, obj.url);
    for a in &obj.attributes {
        write_pair(out, a.name, a.value);
    }
    out.extend_from_slice(b"}\n\n");
}

#[inline]
fn write_header(out: &mut Vec<u8>, template: &[u8], url: &[u8]) {
    out.push(b'@');
    out.extend_from_slice(template);
    out.extend_from_slice(b" { ");
    out.extend_from_slice(url);
    out.push(b'\n');
}

#[inline]
fn write_pair(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    let mut digits = itoa::Buffer::new();
    out.extend_from_slice(name);
    out.push(b'{');
    out.extend_from_slice(digits.format(value.len()).as_bytes());
    out.extend_from_slice(b"}:\t");
    out.extend_from_slice(value);
    out.push(b'\n');
}

fn digits(mut n: usize) -> usize {
    let mut d = 1;
    while n >= 10 {
        n /= 10;
        d += 1;
    }
    d
}

/// Exact length of the canonical encoding of `obj`.
pub(crate) fn encoded_len(obj: &SoifObject) -> usize {
    let header = 1 + obj.template().as_bytes().len() + 3 + obj.url().len() + 1;
    let pairs: usize = obj
        .attributes
        .iter()
        .map(|a| a.name.as_bytes().len() + 1 + digits(a.value.len()) + 3 + a.value.len() + 1)
        .sum();
    header + pairs + 3
}

/// Writes canonical SOIF objects into a `tokio_util` codec buffer.
#[derive(Debug, Default, Clone, Copy)]
pub struct SoifEncoder;

impl Encoder<&SoifObject> for SoifEncoder {
    type Error = SoifError;

    fn encode(&mut self, obj: &SoifObject, dst: &mut BytesMut) -> Result<(), SoifError> {
        let mut out = Vec::with_capacity(obj.encoded_len());
        write_object(obj, &mut out);
        dst.put_slice(&out);
        Ok(())
    }
}
