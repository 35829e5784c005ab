//! Dates in Hina-Di files: RFC 1123 as the spec asks, and what real writers emit besides.
//!
//! Read: RFC 1123 / RFC 822 (`Sun, 06 Nov 1994 08:49:37 GMT`, one-digit days, two-digit
//! years, seconds optional, no weekday), RFC 850 (`Sunday, 06-Nov-94 08:49:37 GMT`), asctime
//! (`Sun Nov  6 08:49:37 1994`), and `1994/11/06 08:49[:37]` or ISO 8601
//! (`1994-11-06T08:49:37+09:00`); a day alone (`1994-11-06`) is its midnight GMT. Zones: `GMT`, `UT`, `UTC`, `Z`, `JST`, the RFC 822 US
//! names, and numeric offsets (`+0900`, `+09:00`, `+09`). A date with no zone is Japan time,
//! as the antenna writers that omit it mean. Written: RFC 1123 in GMT, always.

/// Seconds since the Unix epoch of `text`, or `None` when it is not a date in any form
/// above (or names an impossible day or time).
pub fn parse(text: &str) -> Option<i64> {
    let cleaned = text.replace(',', " ");
    let mut toks: Vec<&str> = cleaned.split_ascii_whitespace().collect();
    if toks.is_empty() {
        return None;
    }
    if weekday(toks[0]) {
        toks.remove(0);
    }
    let first = *toks.first()?;
    let (y, mo, d, time, rest) = if first.bytes().all(|b| b.is_ascii_digit()) {
        // D Mon YYYY HH:MM[:SS] [zone]
        let d = first.parse().ok()?;
        let mo = month(toks.get(1)?)?;
        let y = year(toks.get(2)?)?;
        (y, mo, d, *toks.get(3)?, &toks[4..])
    } else if let Some(m) = month(first) {
        // asctime: Mon D HH:MM:SS YYYY [zone]
        let d = toks.get(1)?.parse().ok()?;
        let time = *toks.get(2)?;
        let y = year(toks.get(3)?)?;
        (y, m, d, time, &toks[4..])
    } else if first.len() >= 8
        && first.as_bytes()[..4].iter().all(u8::is_ascii_digit)
        && matches!(first.as_bytes()[4], b'/' | b'-')
    {
        return numeric(&toks);
    } else {
        // RFC 850: DD-Mon-YY HH:MM:SS [zone]
        let mut parts = first.split('-');
        let d = parts.next()?.parse().ok()?;
        let mo = month(parts.next()?)?;
        let y = year(parts.next()?)?;
        if parts.next().is_some() {
            return None;
        }
        (y, mo, d, *toks.get(1)?, &toks[2..])
    };
    let (h, mi, s) = clock(time)?;
    let offset = match rest {
        [] => JST,
        [z] => zone(z)?,
        _ => return None,
    };
    to_unix(y, mo, d, h, mi, s, offset)
}

/// Formats `secs` (Unix time) as an RFC 1123 date in GMT (`Sun, 06 Nov 1994 08:49:37 GMT`).
pub fn format(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    // 1970-01-01 was a Thursday.
    let wd = (days + 4).rem_euclid(7) as usize;
    format!(
        "{}, {:02} {} {:04} {:02}:{:02}:{:02} GMT",
        ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"][wd],
        d,
        MONTHS[(m - 1) as usize],
        y,
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

const JST: i64 = 9 * 3600;
const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

fn weekday(t: &str) -> bool {
    t.len() >= 3
        && t.is_ascii()
        && ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]
            .iter()
            .any(|d| t[..3].eq_ignore_ascii_case(d))
        && t.bytes().all(|b| b.is_ascii_alphabetic())
}

fn month(t: &str) -> Option<u32> {
    if t.len() < 3 || !t.is_ascii() || !t.bytes().all(|b| b.is_ascii_alphabetic()) {
        return None;
    }
    MONTHS
        .iter()
        .position(|m| t[..3].eq_ignore_ascii_case(m))
        .map(|i| i as u32 + 1)
}

fn year(t: &str) -> Option<i64> {
    if !t.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let y: i64 = t.parse().ok()?;
    Some(match t.len() {
        2 if y < 70 => 2000 + y,
        2 => 1900 + y,
        4 => y,
        _ => return None,
    })
}

fn clock(t: &str) -> Option<(i64, i64, i64)> {
    let mut p = t.split(':');
    let h = p.next()?.parse().ok()?;
    let m = p.next()?.parse().ok()?;
    let s = match p.next() {
        Some(s) => s.parse().ok()?,
        None => 0,
    };
    if p.next().is_some() || h > 23 || m > 59 || s > 60 {
        return None;
    }
    Some((h, m, s.min(59)))
}

fn zone(z: &str) -> Option<i64> {
    let named = [
        ("GMT", 0),
        ("UT", 0),
        ("UTC", 0),
        ("Z", 0),
        ("JST", 9),
        ("EST", -5),
        ("EDT", -4),
        ("CST", -6),
        ("CDT", -5),
        ("MST", -7),
        ("MDT", -6),
        ("PST", -8),
        ("PDT", -7),
    ];
    if let Some((_, h)) = named.iter().find(|(n, _)| n.eq_ignore_ascii_case(z)) {
        return Some(h * 3600);
    }
    let (sign, digits) = match z.as_bytes().first()? {
        b'+' => (1, &z[1..]),
        b'-' => (-1, &z[1..]),
        _ => return None,
    };
    let digits = digits.replace(':', "");
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (h, m): (i64, i64) = match digits.len() {
        2 => (digits.parse().ok()?, 0),
        4 => (digits[..2].parse().ok()?, digits[2..].parse().ok()?),
        _ => return None,
    };
    if h > 23 || m > 59 {
        return None;
    }
    Some(sign * (h * 3600 + m * 60))
}

/// `YYYY/MM/DD HH:MM[:SS] [zone]` and ISO 8601 `YYYY-MM-DD[T| ]HH:MM[:SS][zone]`.
fn numeric(toks: &[&str]) -> Option<i64> {
    let first = toks[0];
    let (date, mut time) = match first.split_once(['T', 't']) {
        Some((d, t)) => (d, Some(t)),
        None => (first, None),
    };
    let mut rest = &toks[1..];
    if time.is_none() {
        match rest.first() {
            Some(t) => {
                time = Some(*t);
                rest = &rest[1..];
            }
            // A day alone: its start, GMT (a zone means nothing without a time).
            None => time = Some("00:00Z"),
        }
    }
    let mut p = date.split(['/', '-']);
    let y = year(p.next()?).filter(|_| date.len() >= 8)?;
    let mo: u32 = p.next()?.parse().ok()?;
    let d: u32 = p.next()?.parse().ok()?;
    if p.next().is_some() {
        return None;
    }
    // A zone glued to the time (`08:49:37+09:00`, `08:49:37Z`).
    let time = time?;
    let (clock_part, glued) = match time.find(['+', '-', 'Z', 'z']) {
        Some(i) => (&time[..i], Some(&time[i..])),
        None => (time, None),
    };
    let (h, mi, s) = clock(clock_part)?;
    let offset = match (glued, rest) {
        (Some(z), []) => zone(z)?,
        (None, [z]) => zone(z)?,
        (None, []) => JST,
        _ => return None,
    };
    to_unix(y, mo, d, h, mi, s, offset)
}

fn to_unix(y: i64, mo: u32, d: u32, h: i64, mi: i64, s: i64, offset: i64) -> Option<i64> {
    if !(1..=12).contains(&mo) || d == 0 || d > days_in_month(y, mo) {
        return None;
    }
    Some(days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + s - offset)
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const T: i64 = 784_111_777; // Sun, 06 Nov 1994 08:49:37 GMT

    #[test]
    fn the_http_forms() {
        for s in [
            "Sun, 06 Nov 1994 08:49:37 GMT",
            "Sun, 6 Nov 1994 08:49:37 GMT",
            "6 Nov 1994 08:49:37 GMT",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
            "Sun Nov  6 08:49:37 1994 GMT",
            "Sun, 06 Nov 1994 17:49:37 +0900",
            "Sun, 06 Nov 1994 17:49:37 JST",
            "Sun, 06 Nov 94 03:49:37 EST",
            "1994-11-06T08:49:37Z",
            "1994-11-06T17:49:37+09:00",
            "1994/11/06 17:49:37",
        ] {
            let got = parse(s);
            // asctime without a zone is Japan time, like every zone-less form.
            let want = if s == "Sun Nov  6 08:49:37 1994" {
                T - JST
            } else {
                T
            };
            assert_eq!(got, Some(want), "{s}");
        }
        assert_eq!(parse("1994/11/06 17:49"), Some(T - 37));
        assert_eq!(parse("1994-11-06"), Some(T - (8 * 3600 + 49 * 60 + 37)));
    }

    #[test]
    fn rejects_nonsense() {
        for s in [
            "",
            "yesterday",
            "Sun, 31 Feb 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 25:00:00 GMT",
            "Sun, 06 Nov 1994 08:49:37 GMT extra",
            "Sun, 06 Foo 1994 08:49:37 GMT",
            "06-Nov-1994-1 08:49:37 GMT",
            "1994/13/06 08:49",
            "Sun, 06 Nov 1994 08:49:37 +99",
        ] {
            assert_eq!(parse(s), None, "{s:?}");
        }
    }

    #[test]
    fn formats_rfc1123() {
        assert_eq!(format(T), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(format(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(format(951_782_400), "Tue, 29 Feb 2000 00:00:00 GMT");
    }

    proptest! {
        #[test]
        fn format_then_parse(secs in -2_000_000_000i64..8_000_000_000) {
            prop_assert_eq!(parse(&format(secs)), Some(secs));
        }

        #[test]
        fn never_panics(s in "\\PC{0,40}") {
            let _ = parse(&s);
        }
    }
}
