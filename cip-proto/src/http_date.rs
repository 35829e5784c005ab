//! HTTP dates (RFC 9110 §5.6.7: IMF-fixdate, and the obsolete RFC 850 and asctime forms,
//! all GMT) as Unix seconds, with `httpdate`. Header fields are read with this, never with
//! the Hina-Di date reader, which takes a date without a zone as Japan time.

use std::time::UNIX_EPOCH;

/// Unix seconds of an HTTP date, or `None` when `text` is not one.
pub fn parse(text: &str) -> Option<i64> {
    let t = httpdate::parse_http_date(text.trim()).ok()?;
    Some(match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_secs()).ok()?,
        Err(e) => -i64::try_from(e.duration().as_secs()).ok()?,
    })
}

/// An HTTP date (IMF-fixdate) for Unix seconds `secs` (dates before 1970 as 1970).
pub fn format(secs: i64) -> String {
    let secs = u64::try_from(secs).unwrap_or(0);
    httpdate::fmt_http_date(UNIX_EPOCH + std::time::Duration::from_secs(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_forms_read_as_gmt() {
        // RFC 9110's example instant, in its three forms.
        for text in [
            "Sun, 06 Nov 1994 08:49:37 GMT",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
        ] {
            assert_eq!(parse(text), Some(784_111_777), "{text}");
        }
        assert_eq!(parse("2001/12/05 21:30:00"), None);
        assert_eq!(format(784_111_777), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(parse(&format(1_700_000_000)), Some(1_700_000_000));
    }
}
