//! Every parser that reads what peers and feeds send, against the machine's own ceiling.
//!
//! `cargo bench -p hints --bench parsers` builds a real-shaped input of tens of MB for each
//! (SOIF summary objects, a CIP-HINT's weightlist, a whole CIP-HINT object and the same
//! object loaded into a routing table, an RFC 2654 tagged index, a Hina-Di file), then
//! prints, best of `PARSERS_RUNS` (3) runs on one core:
//! the parser's MB/s, and in the same run over the same bytes a `memchr` pass (counting line
//! feeds, the cheapest scan a parser could make) and a plain copy (what memory moves). The
//! last column is the parser's share of the `memchr` ceiling. `PARSERS_MB` (40) sets the
//! input size; `PARSERS_ONLY=tagged` runs only the parsers whose name holds that text.

use std::hint::black_box;
use std::time::{Duration, Instant};

use bytes::Bytes;
use cip_proto::soif::{Limits, SoifObject, SoifReader, parse_all, write_object};
use hints::hint::{CipHint, WeightEntry, Weightlist};
use hints::table::{PeerMeta, RoutingTable, TableConfig};

/// A small deterministic generator (xorshift), so runs are comparable.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// A word of 3-10 letters, capitalised.
    fn word(&mut self, out: &mut String) {
        const SYLLABLES: [&str; 16] = [
            "an", "ber", "ci", "dal", "en", "fen", "gar", "hol", "is", "jo", "kah", "lin", "mor",
            "nes", "ol", "par",
        ];
        let n = 2 + self.below(3);
        let start = out.len();
        for _ in 0..n {
            out.push_str(SYLLABLES[self.below(16) as usize]);
        }
        if let Some(first) = out[start..].chars().next() {
            let upper = first.to_ascii_uppercase().to_string();
            out.replace_range(start..start + 1, &upper);
        }
    }

    fn words(&mut self, n: usize) -> String {
        let mut s = String::new();
        for i in 0..n {
            if i > 0 {
                s.push(' ');
            }
            self.word(&mut s);
        }
        s
    }
}

fn size() -> usize {
    std::env::var("PARSERS_MB")
        .ok()
        .and_then(|s| s.parse::<usize>().ok())
        .unwrap_or(40)
        << 20
}

fn runs() -> usize {
    std::env::var("PARSERS_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3)
        .max(1)
}

/// Harvest-like summary objects: a dozen attributes, titles, authors, keywords, a
/// description, sizes and dates, until `bytes`.
fn soif_input(bytes: usize) -> Vec<u8> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut out = Vec::with_capacity(bytes + 4096);
    let mut i = 0u64;
    while out.len() < bytes {
        let url = format!("http://host{}.example/doc/{i}.html", i % 97);
        let mut o = SoifObject::new("DOCUMENT", url).expect("a template");
        let fields: [(&str, String); 10] = [
            ("Title", rng.words(4)),
            ("Author", rng.words(2)),
            ("Keywords", rng.words(6)),
            ("Description", rng.words(24)),
            ("Type", "HTML".to_owned()),
            ("File-Size", (rng.below(200_000) + 100).to_string()),
            ("MD5", format!("{:016x}{:016x}", rng.next(), rng.next())),
            ("Gatherer-Host", format!("gatherer{}.example", i % 7)),
            (
                "Update-Time",
                (850_000_000 + rng.below(10_000_000)).to_string(),
            ),
            ("Last-Modification-Time", (840_000_000 + i).to_string()),
        ];
        for (name, value) in fields {
            o.push(name, value).expect("a valid attribute");
        }
        write_object(&o, &mut out);
        i += 1;
    }
    out
}

/// `n` weightlist entries, Zipf-ish counts, some values with commas to escape.
fn weightlist_entries(n: usize) -> Weightlist {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    (0..n)
        .map(|i| {
            let mut v = rng.words(2);
            if i.is_multiple_of(50) {
                v.push_str(", Jr.");
            }
            v.push_str(&format!(" {i}"));
            WeightEntry {
                value: Bytes::from(v),
                count: 1 + 1000 / (1 + rng.below(1000)),
            }
        })
        .collect()
}

/// The text of one weightlist of about `bytes`.
fn weightlist_input(bytes: usize) -> Vec<u8> {
    hints::weightlist::encode(&weightlist_entries(bytes / 24))
}

/// A whole CIP-HINT object: three weightlists of about `bytes` together.
fn hint_input(bytes: usize) -> Vec<u8> {
    let n = bytes / 24 / 3;
    let mut o = SoifObject::new("CIP-HINT", "-").expect("a template");
    o.push(
        "Attribute-Identifier-List",
        "DOCUMENT:Author, DOCUMENT:Title, DOCUMENT:Keywords",
    )
    .expect("valid");
    o.push("Total-Object-Count", "5000000").expect("valid");
    for attr in ["Author", "Title", "Keywords"] {
        let list = weightlist_entries(n);
        o.push(
            &format!("Weightlist-[DOCUMENT:{attr}]"),
            hints::weightlist::encode(&list),
        )
        .expect("valid");
    }
    let mut out = Vec::new();
    write_object(&o, &mut out);
    out
}

/// An RFC 2654 tagged index (a total) of about `bytes`: three attributes, values each with
/// a few record tags.
fn tagged_input(bytes: usize) -> Vec<u8> {
    let mut rng = Rng(0x1234_5678_9abc_def1);
    let mut out = String::with_capacity(bytes + 4096);
    out.push_str(
        "version: x-tagged-index-1\r\nupdatetype: total\r\nthisupdate: 855938804\r\n\
         BEGIN IO-Schema\r\ncn: TOKEN\r\nsn: FULL\r\ntitle: TOKEN\r\nEND IO-Schema\r\n\
         BEGIN Index-Info\r\n",
    );
    let mut i = 0u64;
    let mut attr = 0;
    let names = ["cn", "sn", "title"];
    out.push_str(names[0]);
    out.push_str(": ");
    let mut first = true;
    while out.len() < bytes {
        if !first {
            out.push('-');
        }
        first = false;
        let tag = 1 + rng.below(100_000);
        out.push_str(&format!("{tag},{}/", tag + 1 + rng.below(9)));
        rng.word(&mut out);
        out.push_str(&format!("{i}\r\n"));
        i += 1;
        if i.is_multiple_of(200_000) && attr + 1 < names.len() {
            attr += 1;
            out.push_str(names[attr]);
            out.push_str(": ");
            first = true;
        }
    }
    out.push_str("END Index-Info\r\n");
    out.into_bytes()
}

/// A Hina-Di file (UTF-8, Japanese titles) of about `bytes`.
fn hinadi_input(bytes: usize) -> Vec<u8> {
    let mut rng = Rng(0x0bad_cafe_dead_beef);
    let mut out = String::with_capacity(bytes + 4096);
    out.push_str(
        "HINA/2.2beta\r\nContent-Type: text/plain; charset=UTF-8\r\n\
         User-Agent: parsers-bench\r\nDate: Sat, 01 Jan 2000 00:00:00 GMT\r\n\r\n",
    );
    let mut i = 0u64;
    while out.len() < bytes {
        out.push_str(&format!(
            "URL: http://diary{}.example/~user{i}/\r\nTitle: 太郎の日記　第{}部\r\n\
             Author-Name: 山田　{}\r\nLast-Modified: Sat, 01 Jan 2000 0{}:00:00 GMT\r\n\
             Content-Type: text/html\r\nLast-Modified-Detected: 946684800\r\n\r\n",
            i % 501,
            rng.below(100),
            rng.words(1),
            rng.below(10)
        ));
        i += 1;
    }
    out.into_bytes()
}

/// Best time of `runs` calls of `f`.
fn best(runs: usize, mut f: impl FnMut() -> usize) -> (Duration, usize) {
    let mut best = Duration::MAX;
    let mut out = 0;
    for _ in 0..runs {
        let t = Instant::now();
        out = black_box(f());
        best = best.min(t.elapsed());
    }
    (best, out)
}

fn mbps(bytes: usize, d: Duration) -> f64 {
    bytes as f64 / d.as_secs_f64() / 1e6
}

fn main() {
    let bytes = size();
    let runs = runs();
    println!(
        "parsers over about {} MB each, best of {runs}, one core (PARSERS_MB, PARSERS_RUNS)",
        bytes >> 20
    );
    println!(
        "{:<34} {:>9} {:>11} {:>11} {:>10} {:>12}",
        "parser", "MB", "parse MB/s", "memchr MB/s", "copy MB/s", "of memchr"
    );
    let mut copy_buf: Vec<u8> = Vec::new();
    // `PARSERS_ONLY`: run only the parsers whose name holds this text (for profiling).
    let only = std::env::var("PARSERS_ONLY").unwrap_or_default();
    let mut row = |name: &str, input: &[u8], parse: &mut dyn FnMut() -> usize| {
        if !name.contains(only.as_str()) {
            return;
        }
        let (d, items) = best(runs, &mut *parse);
        let (scan, _) = best(runs, || memchr::memchr_iter(b'\n', input).count());
        copy_buf.resize(input.len(), 0);
        let (copy, _) = best(runs, || {
            copy_buf.copy_from_slice(input);
            copy_buf[copy_buf.len() / 2] as usize
        });
        let (p, m, c) = (
            mbps(input.len(), d),
            mbps(input.len(), scan),
            mbps(input.len(), copy),
        );
        println!(
            "{name:<34} {:>9.1} {p:>11.0} {m:>11.0} {c:>10.0} {:>11.1} %   ({items} items)",
            input.len() as f64 / 1e6,
            100.0 * p / m
        );
    };

    let soif = Bytes::from(soif_input(bytes));
    row("SOIF, borrowed (SoifReader)", &soif, &mut || {
        SoifReader::new(&soif)
            .map(|o| o.map_or(0, |o| o.attributes.len()))
            .sum()
    });
    row("SOIF, owned zero-copy (parse_all)", &soif, &mut || {
        parse_all(soif.clone(), Limits::default()).map_or(0, |v| v.len())
    });

    let wl = Bytes::from(weightlist_input(bytes));
    row("weightlist, checked (parse)", &wl, &mut || {
        hints::weightlist::parse(&wl).map_or(0, |l| l.len())
    });
    row("weightlist, checked and read", &wl, &mut || {
        hints::weightlist::parse(&wl).map_or(0, |l| l.iter().map(|(v, _)| v.len()).sum())
    });

    let hint = Bytes::from(hint_input(bytes));
    let limits = Limits {
        max_value_size: hint.len(),
        ..Limits::default()
    };
    row("CIP-HINT object (SOIF + checks)", &hint, &mut || {
        let objs = parse_all(hint.clone(), limits).expect("the hint parses");
        CipHint::from_soif(&objs[0])
            .map_or_else(|e| panic!("the hint: {e}"), |(h, _)| h.weightlists.len())
    });

    // What a cold start does with it: parse, check and index into a table in bulk mode (no
    // lookup structures yet), on this thread.
    row("CIP-HINT into a table (bulk load)", &hint, &mut || {
        let objs = parse_all(hint.clone(), limits).expect("the hint parses");
        let (h, _) = CipHint::from_soif(&objs[0]).unwrap_or_else(|e| panic!("the hint: {e}"));
        let table = RoutingTable::new(TableConfig {
            index_threads: 1,
            ..TableConfig::default()
        });
        table.set_bulk_load(true);
        let meta = PeerMeta {
            dsi: cip_proto::Dsi::new("1.3.6.1.4.1.99999.1").expect("a DSI"),
            base_uris: vec!["cip://peer.example/".into()],
            dsi_description: None,
            received: std::time::SystemTime::UNIX_EPOCH,
            expires: None,
            via: None,
            path: Vec::new(),
        };
        let mut results = table.replace_all([(meta, &h)]);
        results
            .pop()
            .and_then(Result::ok)
            .map_or_else(|| panic!("the import failed"), |r| r.entries)
    });

    let tagged = tagged_input(bytes);
    let tagged_limits = cip_proto::tagged::TaggedLimits {
        max_entries: usize::MAX,
        ..cip_proto::tagged::TaggedLimits::default()
    };
    row("tagged index (RFC 2654)", &tagged, &mut || {
        cip_proto::tagged::parse_with_limits(&tagged, &tagged_limits)
            .map_or_else(|e| panic!("tagged: {e}"), |t| t.schema.len())
    });

    let hina = hinadi_input(bytes);
    let hina_limits = cip_proto::hinadi::HinaLimits::default();
    row("Hina-Di file (UTF-8)", &hina, &mut || {
        cip_proto::hinadi::parse_bytes(&hina, hina_limits)
            .map_or_else(|e| panic!("hina-di: {e}"), |p| p.blocks.len())
    });
}
