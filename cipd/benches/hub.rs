//! The hub scenario: one `cipd` polling many peers, then answering referral queries under
//! load.
//!
//! Run with `cargo bench -p cipd --bench hub`; a small run takes a few seconds:
//!
//! ```sh
//! BENCH_PEERS=20 BENCH_ENTRIES=2000 BENCH_SECS=1 cargo bench -p cipd --bench hub
//! ```
//!
//! What happens:
//!
//! 1. `BENCH_PEERS` fake peers start in this process, each a loopback CIP listener served by
//!    [`cipd::transport::serve_connection`] that answers every poll with one pre-encoded
//!    CIP-HINT of `BENCH_ENTRIES` weightlist entries over `DOCUMENT:Author`, `Title` and
//!    `Keywords`. Each attribute's values are ranked by popularity and every peer draws its
//!    objects' values from a Zipf distribution over the ranks (exponent `BENCH_SKEW`) until
//!    it holds its share of distinct values, a value's count being the number of draws that
//!    hit it: a few popular values are held by nearly every peer, a long tail by one or two.
//!    Everything is deterministic from `BENCH_SEED`.
//! 2. The hub is the `cipd` binary of this build, started as a child process with a generated
//!    configuration in a temporary directory: loopback listeners on free ports (learned from
//!    its `listening for queries on http://...` log line), every fake peer with role `poll`
//!    and a one-hour poll interval, so only the start-up polls happen.
//! 3. From the hub's start until the end of the load, a probe sends one popular and one rare
//!    `DOCUMENT:Author=` referral query every 0.5 s, each on a new connection with a 30 s
//!    timeout, and records the worst wait and the timeouts.
//! 4. The time until `/metrics` reports every peer in the table (`cipd_table_peers`) and
//!    until the substring summaries are built (`cipd_table_summaries_pending` at 0), then the
//!    hub's settled `VmRSS` (once it stops falling: what the start-up freed has gone back to
//!    the system) and its `VmHWM`, the import's peak, with their ratio. A few answers are
//!    checked against the referral counts the generated hints imply.
//! 5. Closed-loop load on `BENCH_CONNS` keep-alive HTTP/1.1 connections (one task each, the
//!    next request sent when the previous answer is fully read), `BENCH_SECS` seconds per
//!    query kind, each kind drawn from a pool after a warm-up that asks every distinct query
//!    of the pool once (its row is printed too: what the same queries cost the first time): `mixed` (a quarter each of exact popular, exact rare, substring `~` on a
//!    4-6 byte fragment of a held value, and conjunctive: `Author=a & Keywords=k` of an
//!    author and a keyword one peer holds; the default page of 10 referrals), `mixed
//!    limit=100` (the same with full answers), `exact rare`, `exact popular`,
//!    `substring` (drawn at random from 4,096, so repeated as a skewed workload repeats them),
//!    `substring new` (fragments in no other pool, each sent once: the cost of a first
//!    asking, which the substring cache cannot help), `conjunctive`. Prints q/s,
//!    p50/p99/p99.9 latency, errors and the mean answer size, then the substring cache's
//!    size and the RSS against the README's sizing plus that cache.
//! 6. The yardstick: nginx (`CIPD_BENCH_NGINX`, else `/usr/sbin/nginx`) with one worker per
//!    CPU serving one static file the size of the mean `mixed` answer, under the same load.
//!
//! The load generator, the fake peers and the hub share this machine's CPUs: the figures say
//! what one box does with all of it, and nginx is measured the same way.
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `BENCH_PEERS` | 200 | fake peers the hub polls |
//! | `BENCH_ENTRIES` | 10000 | weightlist entries per peer (split over three attributes) |
//! | `BENCH_SKEW` | 1.1 | Zipf exponent of the value popularity |
//! | `BENCH_SEED` | 1 | seed of everything generated |
//! | `BENCH_CONNS` | 64 | HTTP connections of the load |
//! | `BENCH_SECS` | 5 | seconds of load per query kind |
//! | `CIPD_BENCH_NGINX` | `/usr/sbin/nginx` | the nginx binary of the yardstick |
//! | `BENCH_ANSWER_CACHE` | the daemon's | `limits.answer_cache_bytes` of the hub (0: every answer computed, as on a hub whose table changes all the time) |
//! | `BENCH_HUB_LIMITS` | none | lines added to the hub's `[limits]` (`max_peer_table_bytes = 67108864`; `\n` for a line break) |
//! | `BENCH_HUB_TOML` | none | tables added to the hub's configuration (`\n` for a line break) |
//! | `BENCH_KEEP` | unset | when set, the hub's directory (configuration, log, spool) is kept |
//! | `BENCH_HUB_WRAP` | none | a command the hub runs under (`heaptrack -o /tmp/hub`), split at spaces |
//! | `BENCH_KINDS` | all | comma-separated kinds to load (`mixed,substring`), for profiling one |
//! | `BENCH_CHURN_SECS` | 0 | when above 0, after the answer checks: every peer changes `BENCH_CHURN_PERCENT` (1) of its values once a minute, spread over the minute, for this many seconds, and serves them as deltas; the hub polls every `BENCH_CHURN_POLL_SECS` (5). Prints the probe's p99 during it (an exact query every 20 ms), the hub's RSS against settled (sampled every 250 ms), the changed entries applied and the hub's CPU per changed entry |
//! | `BENCH_INPROC` | unset | when set, no hub: the hints are loaded into a table in this process and the first N `substring new` queries (`BENCH_INPROC=N`; 0: all) are timed on one thread: what a first asking costs the table |

mod common;
use common::env_or;

use std::collections::{HashMap, HashSet, VecDeque};
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use bytes::Bytes;
use cip_proto::Dsi;
use cip_proto::cip::{IndexObject, IndexType, PollResult, Request};
use cipd::ctl::query::percent_encode;
use cipd::transport::{PeerContext, Reply, RequestHandler, TransportConfig, serve_connection};
use hints::hint::{AttrSpec, CipHint, WeightEntry, Weightlist};
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// The template of every generated value.
const TEMPLATE: &str = "DOCUMENT";
/// The attributes each peer's hint describes, in weightlist order.
const ATTRIBUTES: [&str; 3] = ["Author", "Title", "Keywords"];
/// `limits.max_referrals` in the hub's configuration (the daemon's default, set explicitly
/// because the answer checks depend on it).
const MAX_REFERRALS: usize = 100;
/// `limits.default_referrals` in the hub's configuration (the daemon's default): the
/// referrals of an answer that names no `limit`.
const DEFAULT_REFERRALS: usize = 10;
/// Timeout of one probe query, and of one request of the load.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Period of the probe.
const PROBE_PERIOD: Duration = Duration::from_millis(500);
/// Longest wait for the hub to fill its table.
const TABLE_DEADLINE: Duration = Duration::from_secs(900);
/// Queries per generated pool.
const POOL: usize = 4096;
/// Longest a warm-up may take (it ends when every query was asked once).
const WARM_UP_LIMIT: Duration = Duration::from_secs(60);
/// Size of the pool of substring queries each sent once.
const NEW_SUBSTRINGS: usize = 65_536;
/// Syllables of the generated words.
const SYLLABLES: [&str; 28] = [
    "an", "ber", "cor", "dal", "el", "fen", "gar", "hol", "is", "jo", "ka", "lin", "mor", "nes",
    "ol", "par", "qui", "ros", "sil", "tor", "ul", "van", "wes", "xi", "yor", "zan", "ci", "mo",
];
/// Given names of the `Author` values: shared by many values, so fragments of them make
/// broad substring queries.
const GIVEN: [&str; 32] = [
    "Maria", "Jose", "Anna", "David", "Laura", "Pierre", "Yuki", "Ahmed", "Elena", "Jan", "Sofia",
    "Lucas", "Amira", "Pavel", "Ines", "Tomas", "Chen", "Olga", "Diego", "Fatima", "Henrik",
    "Priya", "Marco", "Zoe", "Kofi", "Lena", "Ivan", "Noor", "Hugo", "Mei", "Sven", "Clara",
];
/// First words of the `Title` values.
const ADJECTIVES: [&str; 16] = [
    "Silent", "Modern", "Ancient", "Hidden", "Applied", "Northern", "Brief", "Complete", "Early",
    "Final", "Golden", "Lost", "Open", "Quiet", "Rapid", "Second",
];
/// Second words of the `Title` values.
const NOUNS: [&str; 16] = [
    "Rivers", "Methods", "Letters", "Gardens", "Systems", "Voyages", "Maps", "Songs", "Tables",
    "Engines", "Harbours", "Archives", "Bridges", "Stories", "Fields", "Mirrors",
];

fn main() {
    let settings = Settings::from_env();
    settings.print();

    let started = Instant::now();
    let mesh = Mesh::generate(&settings);
    let pools = Pools::new(&mesh, &settings);
    println!(
        "generated {} hints in {:.2} s: {:.1} MB of SOIF, {} distinct values, {} popular \
         (held by >= 90% of the peers), {} rare (held by 1-2)",
        mesh.peers.len(),
        started.elapsed().as_secs_f64(),
        mesh.payload_bytes() as f64 / 1e6,
        mesh.distinct_values(),
        pools.popular.len(),
        pools.rare_total,
    );

    if std::env::var_os("BENCH_INPROC").is_some() {
        in_process(&mesh, &pools);
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("the runtime starts");
    let summary = runtime.block_on(run(&settings, mesh, pools));
    summary.print(&settings);
}

/// `BENCH_INPROC`: the generated hints loaded into a routing table in this process (the
/// daemon's defaults), then every `substring new` query answered once on this thread, no
/// HTTP: what a first asking costs the table itself, for profiling it.
fn in_process(mesh: &Mesh, pools: &Pools) {
    use hints::query::Query as TableQuery;
    use hints::rank::QueryOptions;
    use hints::table::{PeerMeta, RoutingTable, TableConfig};
    let table = RoutingTable::new(TableConfig::default());
    let limits = cip_proto::soif::Limits::unlimited();
    let hints: Vec<(PeerMeta, CipHint)> = mesh
        .peers
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let objects = cip_proto::soif::parse_all(p.payload.clone(), limits)
                .expect("generated hints parse");
            let (hint, _) = CipHint::from_soif(&objects[0]).expect("generated hints are hints");
            let meta = PeerMeta {
                dsi: Dsi::new(&format!("1.3.6.1.4.1.99999.{i}")).expect("a DSI"),
                base_uris: vec![base_uri(i)],
                dsi_description: None,
                received: std::time::SystemTime::UNIX_EPOCH,
                expires: None,
                via: None,
                path: Vec::new(),
            };
            (meta, hint)
        })
        .collect();
    let start = Instant::now();
    table.set_bulk_load(true);
    let results = table.replace_all(hints.iter().map(|(m, h)| (m.clone(), h)));
    table.set_bulk_load(false);
    assert!(
        results.iter().all(Result::is_ok),
        "every generated hint imports"
    );
    table.wait_for_summaries();
    drop(hints);
    let stats = table.stats();
    println!(
        "in process: loaded and summarized in {:.2} s, {} summaries ({:.1} MB), table {:.1} MB",
        start.elapsed().as_secs_f64(),
        stats.summaries,
        stats.summary_bytes as f64 / 1e6,
        stats.approx_bytes as f64 / 1e6
    );
    let opts = QueryOptions {
        limit: DEFAULT_REFERRALS,
        ..QueryOptions::default()
    };
    // `BENCH_INPROC=N`: the first N queries (0: all).
    let n = env_or("BENCH_INPROC", 0usize);
    let n = if n == 0 { usize::MAX } else { n };
    let queries: Vec<TableQuery> = pools
        .substring_new
        .iter()
        .take(n)
        .map(|q| TableQuery::parse(&q.text).expect("generated queries parse"))
        .collect();
    let mut micros = Vec::with_capacity(queries.len());
    let mut referrals = 0;
    let all = Instant::now();
    for q in &queries {
        let t = Instant::now();
        referrals += table.answer(q, &opts).len();
        micros.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let wall = all.elapsed().as_secs_f64();
    micros.sort_by(f64::total_cmp);
    let at = |p: f64| micros[((micros.len() as f64 * p) as usize).min(micros.len() - 1)];
    println!(
        "substring new, one thread: {} queries, mean {:.0} us, p50 {:.0} us, p90 {:.0} us, \
         p99 {:.0} us, max {:.0} us ({:.1} referrals each)",
        queries.len(),
        wall * 1e6 / queries.len().max(1) as f64,
        at(0.5),
        at(0.9),
        at(0.99),
        at(1.0),
        referrals as f64 / queries.len().max(1) as f64
    );
}

// ---- settings --------------------------------------------------------------------------

/// The run's configuration, from the environment.
struct Settings {
    peers: usize,
    entries: usize,
    skew: f64,
    seed: u64,
    conns: usize,
    secs: f64,
    /// `BENCH_KINDS`: the kinds to load (all when empty).
    kinds: Vec<String>,
    cpus: usize,
    nginx: PathBuf,
    /// `BENCH_CHURN_SECS`, `BENCH_CHURN_PERCENT`, `BENCH_CHURN_POLL_SECS`.
    churn_secs: f64,
    churn_percent: f64,
    churn_poll: f64,
}

impl Settings {
    fn from_env() -> Self {
        let settings = Self {
            peers: env_or("BENCH_PEERS", 200),
            entries: env_or("BENCH_ENTRIES", 10_000),
            skew: env_or("BENCH_SKEW", 1.1),
            seed: env_or("BENCH_SEED", 1),
            conns: env_or("BENCH_CONNS", 64),
            secs: env_or("BENCH_SECS", 5.0),
            kinds: std::env::var("BENCH_KINDS")
                .unwrap_or_default()
                .split(',')
                .map(str::trim)
                .filter(|k| !k.is_empty())
                .map(str::to_owned)
                .collect(),
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            nginx: std::env::var_os("CIPD_BENCH_NGINX")
                .map_or_else(|| PathBuf::from("/usr/sbin/nginx"), PathBuf::from),
            churn_secs: env_or("BENCH_CHURN_SECS", 0.0),
            churn_percent: env_or("BENCH_CHURN_PERCENT", 1.0),
            churn_poll: env_or("BENCH_CHURN_POLL_SECS", 5.0),
        };
        assert!(settings.peers >= 1, "BENCH_PEERS must be at least 1");
        assert!(settings.entries >= 3, "BENCH_ENTRIES must be at least 3");
        assert!(settings.conns >= 1, "BENCH_CONNS must be at least 1");
        assert!(
            settings.skew > 0.0 && settings.secs > 0.0,
            "BENCH_SKEW and BENCH_SECS must be positive"
        );
        settings
    }

    fn print(&self) {
        println!("cipd hub benchmark");
        println!(
            "  BENCH_PEERS={} BENCH_ENTRIES={} BENCH_SKEW={} BENCH_SEED={} BENCH_CONNS={} \
             BENCH_SECS={}",
            self.peers, self.entries, self.skew, self.seed, self.conns, self.secs
        );
        println!(
            "  {} CPUs shared by the hub, the fake peers and the load generator; nginx: {}",
            self.cpus,
            self.nginx.display()
        );
    }

    fn load_time(&self) -> Duration {
        Duration::from_secs_f64(self.secs)
    }
}

// ---- generated mesh --------------------------------------------------------------------

/// splitmix64: a hash of `x`, for seeding and for deterministic choices.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A Zipf distribution over ranks `0..n`: rank `k` drawn with weight `(k + 1)^-s`.
struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    fn new(n: usize, s: f64) -> Self {
        let mut acc = 0.0;
        let cdf = (1..=n)
            .map(|k| {
                acc += (k as f64).powf(-s);
                acc
            })
            .collect();
        Self { cdf }
    }

    fn len(&self) -> usize {
        self.cdf.len()
    }

    fn sample(&self, rng: &mut fastrand::Rng) -> u32 {
        let total = self.cdf[self.cdf.len() - 1];
        let u = rng.f64() * total;
        self.cdf
            .partition_point(|&c| c <= u)
            .min(self.cdf.len() - 1) as u32
    }
}

/// The values of each attribute, by popularity rank. A rank's word is a bijective scramble of
/// the rank spelled in syllables, so values are distinct within an attribute and popular
/// ones share no prefix.
struct Vocabulary {
    seed: u64,
    syllables: u32,
    modulus: u64,
}

impl Vocabulary {
    /// Multiplier of the scramble: a prime, so coprime with `28^k`.
    const SCRAMBLE: u64 = 2_654_435_761;

    fn new(seed: u64, size: usize) -> Self {
        let mut syllables = 4;
        while 28u64.pow(syllables) < size as u64 {
            syllables += 1;
        }
        Self {
            seed,
            syllables,
            modulus: 28u64.pow(syllables),
        }
    }

    fn word(&self, attr: usize, rank: u32) -> String {
        let offset = mix(self.seed ^ ((attr as u64 + 1) << 32)) % self.modulus;
        let mut code = (u64::from(rank) * Self::SCRAMBLE + offset) % self.modulus;
        let mut w = String::new();
        for _ in 0..self.syllables {
            w.push_str(SYLLABLES[(code % 28) as usize]);
            code /= 28;
        }
        w
    }

    /// The value of rank `rank` of attribute `attr` (an index into [`ATTRIBUTES`]).
    fn value(&self, attr: usize, rank: u32) -> String {
        let word = self.word(attr, rank);
        let h = mix(self.seed ^ mix(((attr as u64) << 40) | u64::from(rank)));
        match attr {
            0 => format!("{} {}", GIVEN[h as usize % GIVEN.len()], capitalize(&word)),
            1 => format!(
                "{} {} {}",
                ADJECTIVES[h as usize % ADJECTIVES.len()],
                NOUNS[(h >> 8) as usize % NOUNS.len()],
                capitalize(&word)
            ),
            _ => word,
        }
    }
}

fn capitalize(w: &str) -> String {
    let mut c = w.chars();
    match c.next() {
        Some(f) => f.to_ascii_uppercase().to_string() + c.as_str(),
        None => String::new(),
    }
}

/// One fake peer's data.
struct PeerData {
    /// The ranks it holds, per attribute.
    ranks: [Vec<u32>; 3],
    /// Its hint, encoded.
    payload: Bytes,
    /// With churn: the hint itself, its weightlists in the order a delta-made hint lists
    /// them (so that deltas apply byte for byte).
    hint: Option<CipHint>,
}

/// Every peer's hint, and who holds what.
struct Mesh {
    vocab: Vocabulary,
    peers: Vec<PeerData>,
    /// Per attribute and rank: how many peers hold the value.
    holders: [Vec<u32>; 3],
}

impl Mesh {
    fn generate(s: &Settings) -> Self {
        let per_attr: [usize; 3] =
            std::array::from_fn(|a| s.entries / 3 + usize::from(a < s.entries % 3));
        // Ranks enough that the tail is mostly held once, even for few peers.
        let size = s.peers.max(8) * per_attr[0];
        let zipf = Zipf::new(size, s.skew);
        let vocab = Vocabulary::new(s.seed, size);
        let threads = s.cpus.min(s.peers).max(1);
        let mut peers: Vec<Option<PeerData>> = (0..s.peers).map(|_| None).collect();
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    let (zipf, vocab, per_attr) = (&zipf, &vocab, &per_attr);
                    scope.spawn(move || {
                        (t..s.peers)
                            .step_by(threads)
                            .map(|i| {
                                let churn = s.churn_secs > 0.0;
                                (i, make_peer(i, s.seed, zipf, vocab, per_attr, churn))
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            for h in handles {
                for (i, p) in h.join().expect("a generator thread panicked") {
                    peers[i] = Some(p);
                }
            }
        });
        let peers: Vec<PeerData> = peers.into_iter().flatten().collect();
        let mut holders: [Vec<u32>; 3] = std::array::from_fn(|_| vec![0; size]);
        for p in &peers {
            for (a, ranks) in p.ranks.iter().enumerate() {
                for &r in ranks {
                    holders[a][r as usize] += 1;
                }
            }
        }
        Self {
            vocab,
            peers,
            holders,
        }
    }

    fn payload_bytes(&self) -> usize {
        self.peers.iter().map(|p| p.payload.len()).sum()
    }

    fn distinct_values(&self) -> usize {
        self.holders
            .iter()
            .map(|h| h.iter().filter(|&&n| n > 0).count())
            .sum()
    }

    /// Peers holding a value of `attr` that contains `fragment`, ignoring ASCII case (what a
    /// `~` query matches).
    fn substring_holders(&self, attr: usize, fragment: &str) -> usize {
        let needle = fragment.to_ascii_lowercase();
        let matching: HashSet<u32> = (0..self.holders[attr].len() as u32)
            .filter(|&r| self.holders[attr][r as usize] > 0)
            .filter(|&r| {
                self.vocab
                    .value(attr, r)
                    .to_ascii_lowercase()
                    .contains(&needle)
            })
            .collect();
        self.peers
            .iter()
            .filter(|p| p.ranks[attr].iter().any(|r| matching.contains(r)))
            .count()
    }
}

fn base_uri(i: usize) -> String {
    format!("http://peer{i}.example/")
}

fn peer_dsi(i: usize) -> Dsi {
    Dsi::new(&format!("1.3.6.1.4.1.99999.1000.{i}")).expect("a valid DSI")
}

fn spec(attr: usize) -> AttrSpec {
    AttrSpec::new(TEMPLATE, ATTRIBUTES[attr]).expect("a valid attribute")
}

/// Peer `i`'s values and hint.
fn make_peer(
    i: usize,
    seed: u64,
    zipf: &Zipf,
    vocab: &Vocabulary,
    per_attr: &[usize; 3],
    churn: bool,
) -> PeerData {
    let mut rng = fastrand::Rng::with_seed(mix(seed ^ mix(i as u64 + 1)));
    let mut ranks: [Vec<u32>; 3] = Default::default();
    let mut weightlists = Vec::with_capacity(3);
    let mut objects = 1;
    for (a, &want) in per_attr.iter().enumerate() {
        let (drawn, draws) = draw(zipf, want, &mut rng);
        objects = objects.max(draws);
        let mut entries: Vec<WeightEntry> = drawn
            .iter()
            .map(|&(rank, count)| WeightEntry {
                value: Bytes::from(vocab.value(a, rank)),
                count,
            })
            .collect();
        if churn {
            entries.sort_by(list_order);
        }
        weightlists.push((spec(a), Weightlist::new(entries)));
        ranks[a] = drawn.into_iter().map(|(rank, _)| rank).collect();
    }
    let hint = CipHint {
        url: format!("{}hint", base_uri(i)),
        attributes: (0..ATTRIBUTES.len()).map(spec).collect(),
        sources: vec![base_uri(i)],
        // Every object has one value of each attribute: the attribute drawn most often
        // counts the objects.
        total_object_count: objects,
        weightlists,
        ..CipHint::default()
    };
    PeerData {
        ranks,
        payload: Bytes::from(hint.to_soif().to_bytes()),
        hint: churn.then_some(hint),
    }
}

/// The order a delta-made hint lists a weightlist in: count, highest first, then value
/// ignoring ASCII case, then value bytes.
fn list_order(x: &WeightEntry, y: &WeightEntry) -> std::cmp::Ordering {
    let folded = |v: &Bytes| v.iter().map(u8::to_ascii_lowercase).collect::<Vec<u8>>();
    y.count
        .cmp(&x.count)
        .then_with(|| folded(&x.value).cmp(&folded(&y.value)))
        .then_with(|| x.value.cmp(&y.value))
}

/// Draws objects' values until `want` distinct ranks are held: `(rank, objects)` by rank, and
/// the number of objects. A steep exponent makes the tail unreachable: after `32 * want`
/// draws the remaining values are taken uniformly (one object each).
fn draw(zipf: &Zipf, want: usize, rng: &mut fastrand::Rng) -> (Vec<(u32, u64)>, u64) {
    let mut counts: HashMap<u32, u64> = HashMap::with_capacity(want * 2);
    let mut draws = 0u64;
    let cap = 32 * want as u64;
    while counts.len() < want && draws < cap {
        *counts.entry(zipf.sample(rng)).or_default() += 1;
        draws += 1;
    }
    while counts.len() < want {
        let rank = rng.u32(..zipf.len() as u32);
        if let std::collections::hash_map::Entry::Vacant(e) = counts.entry(rank) {
            e.insert(1);
            draws += 1;
        }
    }
    let mut drawn: Vec<(u32, u64)> = counts.into_iter().collect();
    drawn.sort_unstable();
    (drawn, draws)
}

// ---- queries ---------------------------------------------------------------------------

/// A referral query and the number of peers it should find.
#[derive(Clone)]
struct Query {
    text: String,
    /// Peers holding a matching value.
    holders: usize,
}

impl Query {
    fn exact(mesh: &Mesh, attr: usize, rank: u32) -> Self {
        Self {
            text: format!(
                "{TEMPLATE}:{}={}",
                ATTRIBUTES[attr],
                mesh.vocab.value(attr, rank)
            ),
            holders: mesh.holders[attr][rank as usize] as usize,
        }
    }

    fn path(&self, limit: Option<usize>) -> String {
        let mut p = format!("/v1/referrals?q={}", percent_encode(&self.text));
        if let Some(n) = limit {
            p.push_str(&format!("&limit={n}"));
        }
        p
    }

    /// Referrals the hub should answer with.
    fn expected(&self, limit: Option<usize>) -> usize {
        self.holders
            .min(limit.unwrap_or(DEFAULT_REFERRALS).min(MAX_REFERRALS))
    }
}

/// The queries of the probe, the checks and the load.
struct Pools {
    popular: Vec<Query>,
    rare: Vec<Query>,
    /// Values held by one or two peers, before sampling [`Pools::rare`].
    rare_total: usize,
    /// Substring queries; `holders` is known only for the first few (the checks).
    substring: Vec<Query>,
    /// Substring queries in none of the other pools, each sent once (until they run out):
    /// what a query costs the first time it is asked.
    substring_new: Vec<Query>,
    /// Two exact terms one peer both holds; `holders` known for the first few.
    conjunctive: Vec<Query>,
    /// The probe's popular and rare `DOCUMENT:Author=` queries.
    probe: [Query; 2],
}

impl Pools {
    /// Substring queries whose holders are counted, for the answer checks.
    const CHECKED_SUBSTRINGS: usize = 3;

    fn new(mesh: &Mesh, s: &Settings) -> Self {
        let mut rng = fastrand::Rng::with_seed(mix(s.seed ^ 0x51ee_d5ee_d000));
        let mut by_holders: Vec<(u32, usize, u32)> = Vec::new();
        let mut rare = Vec::new();
        for (a, holders) in mesh.holders.iter().enumerate() {
            for (r, &n) in holders.iter().enumerate() {
                if n * 10 >= s.peers as u32 * 9 {
                    by_holders.push((n, a, r as u32));
                }
                if (1..=2).contains(&n) {
                    rare.push((a, r as u32));
                }
            }
        }
        if by_holders.len() < 8 {
            by_holders = mesh
                .holders
                .iter()
                .enumerate()
                .flat_map(|(a, h)| h.iter().enumerate().map(move |(r, &n)| (n, a, r as u32)))
                .filter(|&(n, _, _)| n > 0)
                .collect();
        }
        by_holders.sort_unstable_by(|x, y| y.0.cmp(&x.0).then((x.1, x.2).cmp(&(y.1, y.2))));
        let popular: Vec<Query> = by_holders
            .iter()
            .take(64)
            .map(|&(_, a, r)| Query::exact(mesh, a, r))
            .collect();
        let rare_total = rare.len();
        rng.shuffle(&mut rare);
        let rare: Vec<Query> = rare
            .iter()
            .take(POOL)
            .map(|&(a, r)| Query::exact(mesh, a, r))
            .collect();
        let fragment = |rng: &mut fastrand::Rng| loop {
            let attr = rng.usize(..ATTRIBUTES.len());
            let peer = &mesh.peers[rng.usize(..mesh.peers.len())];
            let rank = peer.ranks[attr][rng.usize(..peer.ranks[attr].len())];
            let value = mesh.vocab.value(attr, rank);
            let len = rng.usize(4..=6);
            if value.len() < len {
                continue;
            }
            let start = rng.usize(..=value.len() - len);
            let fragment = &value[start..start + len];
            if fragment.starts_with(' ') || fragment.ends_with(' ') {
                continue;
            }
            break (attr, fragment.to_owned());
        };
        let mut substring = Vec::with_capacity(POOL);
        let mut seen = std::collections::HashSet::new();
        while substring.len() < POOL {
            let (attr, fragment) = fragment(&mut rng);
            let holders = if substring.len() < Self::CHECKED_SUBSTRINGS {
                mesh.substring_holders(attr, &fragment)
            } else {
                0
            };
            let text = format!("{TEMPLATE}:{}~{fragment}", ATTRIBUTES[attr]);
            seen.insert(text.to_ascii_lowercase());
            substring.push(Query { text, holders });
        }
        let mut substring_new = Vec::with_capacity(NEW_SUBSTRINGS);
        for _ in 0..NEW_SUBSTRINGS * 4 {
            if substring_new.len() == NEW_SUBSTRINGS {
                break;
            }
            let (attr, fragment) = fragment(&mut rng);
            let text = format!("{TEMPLATE}:{}~{fragment}", ATTRIBUTES[attr]);
            if seen.insert(text.to_ascii_lowercase()) {
                substring_new.push(Query { text, holders: 0 });
            }
        }
        let mut conjunctive = Vec::with_capacity(POOL);
        while conjunctive.len() < POOL {
            let peer = &mesh.peers[rng.usize(..mesh.peers.len())];
            let (authors, keywords) = (&peer.ranks[0], &peer.ranks[2]);
            if authors.is_empty() || keywords.is_empty() {
                break;
            }
            let a = authors[rng.usize(..authors.len())];
            let k = keywords[rng.usize(..keywords.len())];
            let holders = if conjunctive.len() < Self::CHECKED_SUBSTRINGS {
                mesh.peers
                    .iter()
                    .filter(|p| p.ranks[0].contains(&a) && p.ranks[2].contains(&k))
                    .count()
            } else {
                0
            };
            conjunctive.push(Query {
                text: format!(
                    "{TEMPLATE}:{}={} & {TEMPLATE}:{}={}",
                    ATTRIBUTES[0],
                    mesh.vocab.value(0, a),
                    ATTRIBUTES[2],
                    mesh.vocab.value(2, k)
                ),
                holders,
            });
        }
        let probe = [Self::probe_popular(mesh), Self::probe_rare(mesh)];
        Self {
            popular,
            rare: if rare.is_empty() {
                vec![probe[1].clone()]
            } else {
                rare
            },
            rare_total,
            substring,
            substring_new,
            conjunctive,
            probe,
        }
    }

    /// The `Author` value held by the most peers.
    fn probe_popular(mesh: &Mesh) -> Query {
        let h = &mesh.holders[0];
        let rank = (0..h.len())
            .max_by_key(|&r| (h[r], usize::MAX - r))
            .unwrap_or(0);
        Query::exact(mesh, 0, rank as u32)
    }

    /// The least popular `Author` value held by the fewest peers.
    fn probe_rare(mesh: &Mesh) -> Query {
        let h = &mesh.holders[0];
        let rank = (0..h.len())
            .filter(|&r| h[r] > 0)
            .min_by_key(|&r| (h[r], usize::MAX - r))
            .unwrap_or(0);
        Query::exact(mesh, 0, rank as u32)
    }

    /// A quarter each of exact popular, exact rare, substring and conjunctive queries.
    fn mixed(&self, limit: Option<usize>) -> Vec<String> {
        (0..POOL)
            .map(|i| match i % 4 {
                0 => self.popular[i / 4 % self.popular.len()].path(limit),
                1 => self.rare[i / 4 % self.rare.len()].path(limit),
                2 => self.substring[i / 4 % self.substring.len()].path(limit),
                _ if self.conjunctive.is_empty() => self.rare[0].path(limit),
                _ => self.conjunctive[i / 4 % self.conjunctive.len()].path(limit),
            })
            .collect()
    }

    fn paths(queries: &[Query]) -> Vec<String> {
        queries.iter().map(|q| q.path(None)).collect()
    }

    /// The load's query kinds, in order, and whether each query is sent once (else they
    /// are drawn at random, so repeated).
    fn kinds(&self) -> Vec<(&'static str, Vec<String>, bool)> {
        vec![
            ("mixed", self.mixed(None), false),
            ("mixed limit=100", self.mixed(Some(MAX_REFERRALS)), false),
            ("exact rare", Self::paths(&self.rare), false),
            ("exact popular", Self::paths(&self.popular), false),
            ("substring", Self::paths(&self.substring), false),
            ("substring new", Self::paths(&self.substring_new), true),
            ("conjunctive", Self::paths(&self.conjunctive), false),
        ]
    }

    /// Queries whose referral count is checked before the load: `(label, query, limit)`.
    fn checks(&self) -> Vec<(&'static str, &Query, Option<usize>)> {
        let mut v = Vec::new();
        for q in self.popular.iter().take(3) {
            v.push(("popular", q, None));
        }
        v.push(("popular", &self.popular[0], Some(MAX_REFERRALS)));
        for q in self.rare.iter().take(3) {
            v.push(("rare", q, None));
        }
        for q in self.substring.iter().take(Self::CHECKED_SUBSTRINGS) {
            v.push(("substring", q, None));
        }
        for q in self.conjunctive.iter().take(Self::CHECKED_SUBSTRINGS) {
            v.push(("conjunctive", q, None));
        }
        v
    }
}

// ---- fake peers ------------------------------------------------------------------------

/// Answers polls with one index object: fixed, or with churn the peer's current hint, as
/// a delta from the last one to a poller that holds that and asks for deltas.
struct FakePeer {
    result: PollResult,
    polls: Arc<AtomicU64>,
    churn: Option<Arc<Mutex<ChurnState>>>,
}

/// A churning peer's hint: the current one, its version, and the delta from the one
/// before.
struct ChurnState {
    hint: CipHint,
    whole: Bytes,
    version: u64,
    /// `(version before, the delta from it)`.
    delta: Option<(u64, Bytes)>,
    /// Weightlist entries changed so far, by count (a changed count) or value (one entry
    /// out, one in).
    changed: u64,
    /// Changes whose delta could not be made (served whole).
    whole_only: u64,
}

impl ChurnState {
    fn new(hint: CipHint, whole: Bytes) -> Self {
        Self {
            version: hints::delta::digest(&hint),
            hint,
            whole,
            delta: None,
            changed: 0,
            whole_only: 0,
        }
    }

    /// Changes `percent` of the values: half have their count raised by one, half are
    /// replaced by a value of generation `generation`.
    fn change(&mut self, percent: f64, generation: u64, rng: &mut fastrand::Rng) {
        let old = self.hint.clone();
        let mut max = 0;
        for (_, list) in &mut self.hint.weightlists {
            let mut entries = std::mem::take(list).into_entries();
            let n = ((entries.len() as f64 * percent / 100.0).round() as usize).max(1);
            for k in 0..n {
                let i = rng.usize(..entries.len());
                let e = &mut entries[i];
                if k % 2 == 0 {
                    e.count += 1;
                    self.changed += 1;
                } else {
                    let value = format!(
                        "{} g{generation}",
                        String::from_utf8_lossy(&e.value)
                            .split(" g")
                            .next()
                            .unwrap_or_default()
                    );
                    e.value = Bytes::from(value);
                    self.changed += 2;
                }
            }
            entries.sort_by(list_order);
            entries.dedup_by(|b, a| a.value == b.value);
            max = entries.iter().map(|e| e.count).max().unwrap_or(0).max(max);
            *list = Weightlist::new(entries);
        }
        self.hint.total_object_count = self.hint.total_object_count.max(max);
        self.whole = Bytes::from(self.hint.to_soif().to_bytes());
        let before = self.version;
        self.version = hints::delta::digest(&self.hint);
        self.delta = match hints::delta::HintDelta::between(&old, &self.hint) {
            Some(d) => Some((before, Bytes::from(d.to_soif().to_bytes()))),
            None => {
                self.whole_only += 1;
                None
            }
        };
    }
}

impl RequestHandler for FakePeer {
    async fn handle(&self, request: Request, _peer: &PeerContext) -> Reply {
        match request {
            Request::Poll { params, .. } => {
                self.polls.fetch_add(1, Ordering::Relaxed);
                let Some(churn) = &self.churn else {
                    return Reply::result(self.result.clone());
                };
                let param = |name: &str| params.iter().find(|(n, _)| n == name).map(|p| &p.1);
                let have = param("have").and_then(|v| u64::from_str_radix(v, 16).ok());
                let deltas = param("delta").is_some_and(|v| v == "yes");
                let state = lock(churn);
                if have == Some(state.version) {
                    return Reply::status(
                        cip_proto::cip::ResponseCode::Ok,
                        format!("unchanged since version {:016x}", state.version),
                    );
                }
                let payload = match &state.delta {
                    Some((base, delta)) if deltas && have == Some(*base) => delta.clone(),
                    _ => state.whole.clone(),
                };
                let mut result = self.result.clone();
                if let Some(first) = result.objects.first_mut() {
                    first.payload = payload;
                }
                let mut reply = Reply::result(result);
                reply.comment = Some(format!("version {:016x}", state.version));
                reply
            }
            _ => Reply::ok(),
        }
    }
}

/// Starts one CIP listener per peer; returns their addresses.
async fn start_peers(
    peers: Vec<PeerData>,
    polls: Arc<AtomicU64>,
    token: CancellationToken,
) -> (Vec<SocketAddr>, Vec<Arc<Mutex<ChurnState>>>) {
    let mut addrs = Vec::with_capacity(peers.len());
    let mut states = Vec::new();
    for (i, p) in peers.into_iter().enumerate() {
        let churn = p
            .hint
            .map(|h| Arc::new(Mutex::new(ChurnState::new(h, p.payload.clone()))));
        states.extend(churn.clone());
        let object = IndexObject {
            index_type: IndexType::harvest_soif(),
            dsi: peer_dsi(i),
            base_uris: vec![base_uri(i)],
            dsi_description: Some(format!("bench peer {i}")),
            payload: p.payload,
        };
        let handler = Arc::new(FakePeer {
            result: PollResult {
                objects: vec![object],
            },
            polls: polls.clone(),
            churn,
        });
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a peer listener");
        addrs.push(listener.local_addr().expect("the peer's address"));
        let token = token.clone();
        tokio::spawn(async move {
            let config = Arc::new(TransportConfig::default());
            loop {
                let (tcp, remote) = tokio::select! {
                    r = listener.accept() => match r {
                        Ok(x) => x,
                        Err(_) => continue,
                    },
                    () = token.cancelled() => return,
                };
                let _ = tcp.set_nodelay(true);
                let peer = PeerContext {
                    remote,
                    tls_peer_certificates: None,
                };
                let (h, c, t) = (handler.clone(), config.clone(), token.clone());
                tokio::spawn(async move {
                    let _ = serve_connection(tcp, peer, h.as_ref(), &c, t).await;
                });
            }
        });
    }
    (addrs, states)
}

// ---- churn -----------------------------------------------------------------------------

/// The churn phase (`BENCH_CHURN_SECS`): every peer changes `BENCH_CHURN_PERCENT` of its
/// values once a minute, peer `i` at `i / n` of each minute, while a probe asks an exact
/// query every 20 ms on a keep-alive connection (on a thread of its own) and the hub's RSS
/// is read every 250 ms. Prints the probe's latencies, the RSS against `settled_kib`, the
/// changes the hub took and its CPU per changed entry.
async fn churn(
    settings: &Settings,
    hub: &Hub,
    pools: &Pools,
    peers: &[Arc<Mutex<ChurnState>>],
    settled_kib: u64,
) {
    let (addr, pid, n) = (hub.addr, hub.proc.pid(), peers.len());
    let period = Duration::from_secs(60);
    let length = Duration::from_secs_f64(settings.churn_secs);
    let page = metrics(addr).await.unwrap_or_default();
    let metrics_before_churn = page.clone();
    let counter = |page: &[u8], name: &str| gauge(page, name).unwrap_or(0.0);
    let before = [
        "cipd_deltas_applied_total",
        "cipd_deltas_in_place_total",
        "cipd_deltas_refused_total",
        "cipd_deltas_by_head_total",
    ]
    .map(|c| counter(&page, c));
    let changed_before: u64 = peers.iter().map(|p| lock(p).changed).sum();
    // What the polls alone cost (every answer "unchanged"), to tell the changes' cost apart.
    let idle = Duration::from_secs(10);
    let cpu_idle = cpu_secs(pid);
    tokio::time::sleep(idle).await;
    let polls_rate = (cpu_secs(pid) - cpu_idle) / idle.as_secs_f64();
    let cpu_before = cpu_secs(pid);
    let start = Instant::now();
    let driver = {
        let (peers, percent) = (peers.to_vec(), settings.churn_percent);
        std::thread::spawn(move || {
            let mut rng = fastrand::Rng::with_seed(7);
            let mut generation = 0u64;
            loop {
                generation += 1;
                for (i, p) in peers.iter().enumerate() {
                    let at = period * (generation as u32 - 1) + period.mul_f64(i as f64 / n as f64);
                    if at >= length {
                        return;
                    }
                    if let Some(wait) = at.checked_sub(start.elapsed()) {
                        std::thread::sleep(wait);
                    }
                    lock(p).change(percent, generation, &mut rng);
                }
            }
        })
    };
    let probe = {
        let paths = [pools.probe[0].path(None), pools.probe[1].path(None)];
        std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("the churn probe's runtime starts")
                .block_on(async move {
                    let mut waits = Vec::new();
                    let mut failed = 0u64;
                    let mut sender = connect(addr).await.ok();
                    let mut ticks = tokio::time::interval(Duration::from_millis(20));
                    let mut k = 0;
                    while start.elapsed() < length {
                        ticks.tick().await;
                        k += 1;
                        let sent = Instant::now();
                        let ok = match sender.as_mut() {
                            Some(s) => exchange(s, addr, &paths[k % 2])
                                .await
                                .is_ok_and(|(status, _)| status.is_success()),
                            None => false,
                        };
                        if ok {
                            waits.push(sent.elapsed());
                        } else {
                            failed += 1;
                            sender = connect(addr).await.ok();
                        }
                    }
                    (waits, failed)
                })
        })
    };
    let mut rss_max = 0u64;
    // Once every peer changed once (and was polled), each delta after comes by the head
    // kept from the one before: the steady state, measured apart when the run is long.
    let warm_at = period + Duration::from_secs_f64(settings.churn_poll + 1.0);
    let mut warm: Option<(Instant, f64, u64)> = None;
    while start.elapsed() < length {
        if let Some((rss, _)) = memory_kib(pid) {
            rss_max = rss_max.max(rss);
        }
        if warm.is_none() && start.elapsed() >= warm_at && length >= period * 2 {
            let changed: u64 = peers.iter().map(|p| lock(p).changed).sum();
            warm = Some((Instant::now(), cpu_secs(pid), changed));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let _ = driver.join();
    let (mut waits, failed) = probe.join().expect("the churn probe panicked");
    // The last changes are polled within one interval.
    tokio::time::sleep(Duration::from_secs_f64(settings.churn_poll + 1.0)).await;
    if let Some((rss, _)) = memory_kib(pid) {
        rss_max = rss_max.max(rss);
    }
    let elapsed = start.elapsed().as_secs_f64();
    let cpu = cpu_secs(pid) - cpu_before;
    let polls_cpu = (polls_rate * elapsed).min(cpu);
    let page = metrics(addr).await.unwrap_or_default();
    let [applied, in_place, refused, by_head] = [
        "cipd_deltas_applied_total",
        "cipd_deltas_in_place_total",
        "cipd_deltas_refused_total",
        "cipd_deltas_by_head_total",
    ]
    .map(|c| counter(&page, c));
    let changed: u64 = peers.iter().map(|p| lock(p).changed).sum::<u64>() - changed_before;
    let whole_only: u64 = peers.iter().map(|p| lock(p).whole_only).sum();
    waits.sort_unstable();
    let at = |q: f64| {
        waits
            .get(((waits.len() as f64 * q) as usize).min(waits.len().saturating_sub(1)))
            .copied()
            .unwrap_or_default()
    };
    let ms = |d: Duration| format!("{:.2} ms", d.as_secs_f64() * 1e3);
    let met = |ok: bool| if ok { "MET" } else { "MISSED" };
    println!(
        "churn: {:.0} s, {n} peers each changing {} % of its values once a minute (polled every {} s): {changed} entries changed; the hub applied {} deltas ({} in place, {} of them by the head alone, {} refused; {whole_only} changes served whole)",
        settings.churn_secs,
        settings.churn_percent,
        settings.churn_poll,
        applied - before[0],
        in_place - before[1],
        by_head - before[3],
        refused - before[2],
    );
    println!(
        "churn probe: {} exact queries every 20 ms, {failed} failed; p50 {}, p99 {} (target 5 ms: {}), max {}",
        waits.len(),
        ms(at(0.5)),
        ms(at(0.99)),
        met(at(0.99) <= Duration::from_millis(5)),
        ms(waits.last().copied().unwrap_or_default()),
    );
    let ratio = rss_max as f64 / settled_kib.max(1) as f64;
    let before_page = metrics_before_churn;
    let mb = |page: &[u8], n: &str| counter(page, n) / 1e6;
    println!(
        "churn memory: VmRSS at most {} MiB against {} MiB settled = {ratio:.2}x (target 1.1x: {}); table {:.1} -> {:.1} MB (table's estimate), {} -> {} distinct values (summed over segments)",
        rss_max / 1024,
        settled_kib / 1024,
        met(ratio <= 1.1),
        mb(&before_page, "cipd_table_bytes"),
        mb(&page, "cipd_table_bytes"),
        counter(&before_page, "cipd_table_values"),
        counter(&page, "cipd_table_values"),
    );
    let per_entry = (cpu - polls_cpu) / changed.max(1) as f64;
    let rate = settings.cpus as f64 / per_entry.max(1e-12);
    println!(
        "churn CPU: the hub used {cpu:.1} s of CPU in {elapsed:.0} s, {polls_cpu:.1} s of it the polls' (measured over 10 s without changes) = {:.1} us a changed entry: {:.2} M changed entries a second on {} cores (target 1 M: {})",
        per_entry * 1e6,
        rate / 1e6,
        settings.cpus,
        met(rate >= 1e6),
    );
    if let Some((at, cpu_warm, changed_warm)) = warm {
        let changed_after: u64 = peers.iter().map(|p| lock(p).changed).sum::<u64>() - changed_warm;
        let secs = at.elapsed().as_secs_f64();
        let cpu_after = (cpu_secs(pid) - cpu_warm - polls_rate * secs).max(0.0);
        let per_entry = cpu_after / changed_after.max(1) as f64;
        let rate = settings.cpus as f64 / per_entry.max(1e-12);
        println!(
            "churn CPU after the first minute (every peer's deltas by the head): {:.1} s beyond the polls' in {secs:.0} s for {changed_after} changed entries = {:.1} us a changed entry: {:.2} M a second on {} cores (target 1 M: {})",
            cpu_after,
            per_entry * 1e6,
            rate / 1e6,
            settings.cpus,
            met(rate >= 1e6),
        );
    }
}

/// User and system CPU seconds of process `pid` so far.
fn cpu_secs(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            // Fields after the command name (which may hold spaces): utime is the 12th,
            // stime the 13th, in clock ticks of 1/100 s.
            let rest = &stat[stat.rfind(')')? + 2..];
            let f: Vec<&str> = rest.split_whitespace().collect();
            let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
            Some(ticks as f64 / 100.0)
        })
        .unwrap_or(0.0)
}

// ---- child processes -------------------------------------------------------------------

/// Called with each line the child writes to stdout or stderr.
type LineHook = Arc<dyn Fn(&str) + Send + Sync>;

/// A child process whose output goes to a log file (and its last lines to memory). Dropping
/// it stops the child, printing those lines first when the bench is panicking and the child
/// was still running.
struct Proc {
    name: &'static str,
    child: Child,
    tail: Arc<Mutex<VecDeque<String>>>,
    log: PathBuf,
    /// Set once [`Proc::stop`] ran: the child's output is no longer of interest.
    stopped: bool,
}

impl Proc {
    const TAIL: usize = 40;

    fn spawn(name: &'static str, cmd: &mut Command, log: PathBuf, hook: LineHook) -> Self {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        let file = Arc::new(Mutex::new(
            File::create(&log).unwrap_or_else(|e| panic!("{}: {e}", log.display())),
        ));
        let tail = Arc::new(Mutex::new(VecDeque::with_capacity(Self::TAIL)));
        let out: [Box<dyn Read + Send>; 2] = [
            Box::new(child.stdout.take().expect("piped stdout")),
            Box::new(child.stderr.take().expect("piped stderr")),
        ];
        for stream in out {
            let (file, tail, hook) = (file.clone(), tail.clone(), hook.clone());
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines() {
                    let Ok(line) = line else { break };
                    hook(&line);
                    let _ = writeln!(lock(&file), "{line}");
                    let mut t = lock(&tail);
                    if t.len() == Self::TAIL {
                        t.pop_front();
                    }
                    t.push_back(line);
                }
            });
        }
        Self {
            name,
            child,
            tail,
            log,
            stopped: false,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGTERM, up to 10 s for the child to exit, then SIGKILL. Returns how it exited and
    /// how long it took.
    fn stop(&mut self) -> Option<(ExitStatus, Duration)> {
        self.stopped = true;
        let started = Instant::now();
        if self.running() {
            let termed = Command::new("kill")
                .args(["-TERM", &self.pid().to_string()])
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if !termed {
                let _ = self.child.kill();
            }
            while self.running() && started.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(20));
            }
            if self.running() {
                eprintln!("{} ignored SIGTERM for 10 s; killing it", self.name);
                let _ = self.child.kill();
            }
        }
        let status = self.child.wait().ok()?;
        Some((status, started.elapsed()))
    }

    fn print_tail(&self) {
        eprintln!(
            "---- last lines of {} (full log: {}) ----",
            self.name,
            self.log.display()
        );
        for line in lock(&self.tail).iter() {
            eprintln!("{line}");
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if std::thread::panicking() && !self.stopped {
            self.print_tail();
        }
        self.stop();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The hub's configuration.
fn hub_config(
    dir: &Path,
    peers: &[SocketAddr],
    conns: usize,
    entries: usize,
    poll: &str,
) -> String {
    let mut toml = format!(
        r#"data_dir = {data:?}

[node]
dsi = "1.3.6.1.4.1.99999.999"
description = "cipd hub benchmark"

[listen]
cip = ["127.0.0.1:0"]
http = ["127.0.0.1:0"]

[limits]
max_http_connections = {http}
max_referrals = {MAX_REFERRALS}
default_referrals = {DEFAULT_REFERRALS}
# A weightlist is one SOIF value: a peer of millions of entries sends one of tens of MB.
max_value_size = {value}

[log]
format = "text"
level = "info"
"#,
        data = dir.join("data").display().to_string(),
        http = (conns * 2).max(1024),
        value = (entries * 64).max(16 << 20),
    );
    if let Ok(bytes) = std::env::var("BENCH_ANSWER_CACHE") {
        let bytes: usize = bytes
            .parse()
            .expect("BENCH_ANSWER_CACHE must be a number of bytes");
        toml = toml.replace(
            "[limits]\n",
            &format!("[limits]\nanswer_cache_bytes = {bytes}\n"),
        );
    }
    // Extra limits (`BENCH_HUB_LIMITS="max_peer_table_bytes = 67108864"`).
    if let Ok(extra) = std::env::var("BENCH_HUB_LIMITS") {
        toml = toml.replace(
            "[limits]\n",
            &format!("[limits]\n{}\n", extra.replace("\\n", "\n")),
        );
    }
    // Extra tables for experiments (`BENCH_HUB_TOML="[index]\nsummaries = false"`).
    if let Ok(extra) = std::env::var("BENCH_HUB_TOML") {
        toml.push_str(&extra.replace("\\n", "\n"));
        toml.push('\n');
    }
    for (i, addr) in peers.iter().enumerate() {
        toml.push_str(&format!(
            "\n[[peer]]\nname = \"peer{i}\"\nhost = \"{}\"\nport = {}\nrole = \"poll\"\n\
             poll_interval = \"{poll}\"\n",
            addr.ip(),
            addr.port()
        ));
    }
    toml
}

/// A started hub: the process, its HTTP address, and counts of its warnings and errors.
struct Hub {
    proc: Proc,
    addr: SocketAddr,
    started: Instant,
    listening_after: Duration,
    warnings: Arc<AtomicU64>,
    errors: Arc<AtomicU64>,
}

/// Starts the `cipd` binary of this build on a generated configuration in `dir` and waits
/// for its HTTP listener.
async fn start_hub(
    dir: &Path,
    peers: &[SocketAddr],
    conns: usize,
    entries: usize,
    poll: &str,
) -> Hub {
    let config = dir.join("cipd.toml");
    std::fs::write(&config, hub_config(dir, peers, conns, entries, poll))
        .expect("write the hub's config");
    let (tx, rx) = mpsc::channel::<SocketAddr>();
    let tx = Mutex::new(Some(tx));
    let warnings = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let (w, e) = (warnings.clone(), errors.clone());
    let hook: LineHook = Arc::new(move |line: &str| {
        if line.contains(" WARN ") {
            w.fetch_add(1, Ordering::Relaxed);
        } else if line.contains(" ERROR ") {
            e.fetch_add(1, Ordering::Relaxed);
        }
        const MARK: &str = "listening for queries on http://";
        if let Some(at) = line.find(MARK) {
            let rest = &line[at + MARK.len()..];
            let end = rest
                .find(|c: char| c.is_whitespace() || c == '/')
                .unwrap_or(rest.len());
            if let (Ok(addr), Some(tx)) = (rest[..end].parse(), lock(&tx).take()) {
                let _ = tx.send(addr);
            }
        }
    });
    let started = Instant::now();
    // `BENCH_HUB_WRAP`: a command the hub runs under (a heap profiler), split at spaces.
    let mut command = match std::env::var("BENCH_HUB_WRAP") {
        Ok(wrap) if !wrap.trim().is_empty() => {
            let mut words = wrap.split_whitespace();
            let mut c = Command::new(words.next().expect("a word"));
            c.args(words).arg(env!("CARGO_BIN_EXE_cipd"));
            c
        }
        _ => Command::new(env!("CARGO_BIN_EXE_cipd")),
    };
    let mut proc = Proc::spawn(
        "the hub",
        command.arg("--config").arg(&config).env_remove("RUST_LOG"),
        dir.join("cipd.log"),
        hook,
    );
    let addr = tokio::task::spawn_blocking(move || rx.recv_timeout(Duration::from_secs(120)))
        .await
        .expect("the waiting task");
    let addr = match addr {
        Ok(a) => a,
        Err(e) => {
            // The hook may still be writing the last lines.
            std::thread::sleep(Duration::from_millis(200));
            let state = if proc.running() { "running" } else { "exited" };
            panic!("the hub ({state}) printed no HTTP listener: {e}");
        }
    };
    Hub {
        proc,
        addr,
        started,
        listening_after: started.elapsed(),
        warnings,
        errors,
    }
}

/// A free loopback port (bound, then released).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// Starts nginx serving `size` bytes at `/answer.json`; returns it and its address.
async fn start_nginx(bin: &Path, dir: &Path, size: usize, workers: usize) -> (Proc, SocketAddr) {
    use std::os::unix::fs::PermissionsExt;
    let www = dir.join("www");
    std::fs::create_dir_all(&www).expect("create the nginx root");
    let body: Vec<u8> = (0..size)
        .map(|i| b"{\"referrals\":[]}                \n"[i % 33])
        .collect();
    std::fs::write(www.join("answer.json"), body).expect("write the static file");
    // When run as root, nginx's workers run as an unprivileged user that must read the file.
    for d in [dir, &www] {
        let _ = std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755));
    }
    let _ = std::fs::set_permissions(
        www.join("answer.json"),
        std::fs::Permissions::from_mode(0o644),
    );
    let port = free_port();
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp).expect("create nginx's temporary directory");
    let d = |name: &str| tmp.join(name).display().to_string();
    let conf = format!(
        r#"worker_processes {workers};
daemon off;
master_process on;
pid {pid};
error_log {errlog} warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    sendfile on;
    tcp_nodelay on;
    keepalive_requests 100000000;
    keepalive_timeout 300s;
    default_type application/json;
    client_body_temp_path {body};
    proxy_temp_path {proxy};
    fastcgi_temp_path {fastcgi};
    uwsgi_temp_path {uwsgi};
    scgi_temp_path {scgi};
    server {{
        listen 127.0.0.1:{port};
        root {root};
    }}
}}
"#,
        pid = dir.join("nginx.pid").display(),
        errlog = dir.join("error.log").display(),
        body = d("body"),
        proxy = d("proxy"),
        fastcgi = d("fastcgi"),
        uwsgi = d("uwsgi"),
        scgi = d("scgi"),
        root = www.display(),
    );
    let conf_path = dir.join("nginx.conf");
    std::fs::write(&conf_path, conf).expect("write the nginx config");
    let mut proc = Proc::spawn(
        "nginx",
        Command::new(bin)
            .arg("-p")
            .arg(dir)
            .arg("-c")
            .arg(&conf_path)
            .arg("-e")
            .arg(dir.join("error.log")),
        dir.join("nginx.out"),
        Arc::new(|_: &str| {}),
    );
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let started = Instant::now();
    loop {
        if TcpStream::connect(addr).await.is_ok() {
            return (proc, addr);
        }
        if !proc.running() || started.elapsed() > Duration::from_secs(10) {
            let log = std::fs::read_to_string(dir.join("error.log")).unwrap_or_default();
            panic!("nginx did not start listening on {addr}:\n{log}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `VmRSS` and `VmHWM` of process `pid`, in KiB, once the RSS has settled: the start-up
/// merge and summaries are done, and what they freed has gone back to the system (sampled
/// every 100 ms until two samples a second apart differ by less than 1 MiB, at most 5 s).
/// The high-water mark is then the import's peak.
async fn settled_memory(pid: u32) -> Option<(u64, u64)> {
    let start = Instant::now();
    let mut last = memory_kib(pid)?;
    let mut since = Instant::now();
    while start.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = memory_kib(pid)?;
        if now.0.abs_diff(last.0) >= 1024 {
            last = now;
            since = Instant::now();
        } else if since.elapsed() >= Duration::from_secs(1) {
            return Some(now);
        }
    }
    memory_kib(pid)
}

/// `VmRSS` and `VmHWM` of process `pid`, in KiB.
fn memory_kib(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

// ---- HTTP client -----------------------------------------------------------------------

type Sender = SendRequest<Empty<Bytes>>;

/// Opens a keep-alive HTTP/1.1 connection to `addr`.
async fn connect(addr: SocketAddr) -> Result<Sender, String> {
    let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let _ = tcp.set_nodelay(true);
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

fn get(addr: SocketAddr, path: &str) -> hyper::Request<Empty<Bytes>> {
    hyper::Request::get(path)
        .header(hyper::header::HOST, addr.to_string())
        .body(Empty::new())
        .expect("a valid request")
}

/// Sends `GET path` and reads the whole answer; returns the status and the body's size.
async fn exchange(
    sender: &mut Sender,
    addr: SocketAddr,
    path: &str,
) -> Result<(hyper::StatusCode, usize), String> {
    sender.ready().await.map_err(|e| e.to_string())?;
    let response = sender
        .send_request(get(addr, path))
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status();
    let mut body = response.into_body();
    let mut size = 0;
    while let Some(frame) = body.frame().await {
        if let Some(data) = frame.map_err(|e| e.to_string())?.data_ref() {
            size += data.len();
        }
    }
    Ok((status, size))
}

/// One `GET path` on a new connection, with the whole body.
async fn fetch(addr: SocketAddr, path: &str) -> Result<(hyper::StatusCode, Bytes), String> {
    let mut sender = connect(addr).await?;
    let response = sender
        .send_request(get(addr, path))
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok((status, body))
}

/// The referrals of a `/v1/referrals` answer.
fn referral_count(body: &[u8]) -> Option<usize> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    v.get("referrals")?.as_array().map(Vec::len)
}

/// The value of an unlabelled metric in a Prometheus text page.
fn gauge(page: &[u8], name: &str) -> Option<f64> {
    std::str::from_utf8(page).ok()?.lines().find_map(|l| {
        let mut parts = l.split_whitespace();
        (parts.next()? == name).then_some(())?;
        parts.next()?.parse().ok()
    })
}

/// The hub's `/metrics` page, if it answers within the request timeout.
async fn metrics(addr: SocketAddr) -> Option<Bytes> {
    match tokio::time::timeout(REQUEST_TIMEOUT, fetch(addr, "/metrics")).await {
        Ok(Ok((status, body))) if status.is_success() => Some(body),
        _ => None,
    }
}

// ---- probe -----------------------------------------------------------------------------

/// One probe query's fate.
enum Outcome {
    /// Answered (any status) after `wait`.
    Answered {
        wait: Duration,
        ok: bool,
        referrals: usize,
    },
    TimedOut,
    Failed,
}

/// One probe query.
struct Sample {
    /// 0 popular, 1 rare.
    kind: usize,
    /// Sent this long after the hub started.
    at: Duration,
    outcome: Outcome,
}

/// Sends the two probe queries every [`PROBE_PERIOD`] until `stop`, then waits for those in
/// flight.
async fn probe(
    addr: SocketAddr,
    paths: [String; 2],
    started: Instant,
    stop: CancellationToken,
) -> Vec<Sample> {
    let paths = Arc::new(paths);
    let mut ticks = tokio::time::interval(PROBE_PERIOD);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut tasks = JoinSet::new();
    let mut samples = Vec::new();
    loop {
        tokio::select! {
            _ = ticks.tick() => {
                for kind in 0..2 {
                    let paths = paths.clone();
                    tasks.spawn(async move {
                        let at = started.elapsed();
                        let sent = Instant::now();
                        let outcome = match tokio::time::timeout(
                            REQUEST_TIMEOUT,
                            fetch(addr, &paths[kind]),
                        )
                        .await
                        {
                            Ok(Ok((status, body))) => Outcome::Answered {
                                wait: sent.elapsed(),
                                ok: status.is_success(),
                                referrals: referral_count(&body).unwrap_or(0),
                            },
                            Ok(Err(_)) => Outcome::Failed,
                            Err(_) => Outcome::TimedOut,
                        };
                        Sample { kind, at, outcome }
                    });
                }
            }
            Some(done) = tasks.join_next(), if !tasks.is_empty() => {
                samples.push(done.expect("a probe task panicked"));
            }
            () = stop.cancelled() => break,
        }
    }
    while let Some(done) = tasks.join_next().await {
        samples.push(done.expect("a probe task panicked"));
    }
    samples
}

/// What the probe saw in one phase.
#[derive(Default)]
struct ProbeFigures {
    sent: usize,
    worst: Duration,
    worst_at: Duration,
    timeouts: usize,
    failures: usize,
}

impl ProbeFigures {
    fn of<'a>(samples: impl Iterator<Item = &'a Sample>) -> Self {
        let mut f = Self::default();
        for s in samples {
            f.sent += 1;
            match s.outcome {
                Outcome::Answered { wait, ok, .. } => {
                    if wait > f.worst {
                        (f.worst, f.worst_at) = (wait, s.at);
                    }
                    f.failures += usize::from(!ok);
                }
                Outcome::TimedOut => {
                    f.timeouts += 1;
                    f.worst = REQUEST_TIMEOUT;
                    f.worst_at = s.at;
                }
                Outcome::Failed => f.failures += 1,
            }
        }
        f
    }

    fn line(&self) -> String {
        format!(
            "{} queries, worst wait {} (sent at {:.1} s), {} timeouts, {} failed",
            self.sent,
            ms(self.worst),
            self.worst_at.as_secs_f64(),
            self.timeouts,
            self.failures
        )
    }
}

// ---- load ------------------------------------------------------------------------------

/// The figures of one closed-loop run: every connection's, merged.
struct Load {
    label: String,
    /// Merged per-connection figures; latencies sorted.
    figures: ConnFigures,
    window: Duration,
}

impl Load {
    fn qps(&self) -> f64 {
        self.figures.completed as f64 / self.window.as_secs_f64()
    }

    fn percentile(&self, p: f64) -> Duration {
        let latencies = &self.figures.latencies;
        match latencies.len() {
            0 => Duration::ZERO,
            n => Duration::from_nanos(latencies[((n - 1) as f64 * p).round() as usize]),
        }
    }

    fn mean_size(&self) -> u64 {
        self.figures
            .bytes
            .checked_div(self.figures.answers)
            .unwrap_or(0)
    }

    fn row(&self) -> String {
        format!(
            "{:<22} {:>9.0} {:>10} {:>10} {:>10} {:>7} {:>10}",
            self.label,
            self.qps(),
            ms(self.percentile(0.5)),
            ms(self.percentile(0.99)),
            ms(self.percentile(0.999)),
            self.figures.errors,
            self.mean_size()
        )
    }

    fn header() -> String {
        format!(
            "{:<22} {:>9} {:>10} {:>10} {:>10} {:>7} {:>10}",
            "kind", "q/s", "p50", "p99", "p99.9", "errors", "mean bytes"
        )
    }
}

/// Per-connection figures, merged into a [`Load`].
#[derive(Default)]
struct ConnFigures {
    /// Successful answers completed within the window.
    completed: u64,
    errors: u64,
    first_error: Option<String>,
    /// Latencies of all answers, in nanoseconds.
    latencies: Vec<u64>,
    /// Bytes of successful answers.
    bytes: u64,
    answers: u64,
}

impl ConnFigures {
    fn error(&mut self, e: String) {
        self.errors += 1;
        self.first_error.get_or_insert(e);
    }

    fn merge(&mut self, other: ConnFigures) {
        self.completed += other.completed;
        self.errors += other.errors;
        self.bytes += other.bytes;
        self.answers += other.answers;
        self.latencies.extend(other.latencies);
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
    }
}

/// Closed-loop load: `conns` connections, each sending a random path of `paths` as soon as
/// the previous answer is read, for `window`.
async fn closed_loop(
    label: &str,
    addr: SocketAddr,
    paths: Vec<String>,
    once: bool,
    conns: usize,
    window: Duration,
) -> Load {
    let paths = Arc::new(paths);
    // With `once`, the connections take the paths in turn.
    let next = Arc::new(AtomicU64::new(0));
    let mut senders = Vec::with_capacity(conns);
    for _ in 0..conns {
        senders.push(
            connect(addr)
                .await
                .unwrap_or_else(|e| panic!("{label}: cannot connect to {addr}: {e}")),
        );
    }
    let started = Instant::now();
    let deadline = started + window;
    let mut tasks = JoinSet::new();
    for (i, sender) in senders.into_iter().enumerate() {
        let (paths, next) = (paths.clone(), next.clone());
        tasks.spawn(async move {
            let mut rng = fastrand::Rng::with_seed(mix(i as u64));
            let mut f = ConnFigures::default();
            let mut sender = Some(sender);
            while Instant::now() < deadline {
                let mut s = match sender.take() {
                    Some(s) => s,
                    None => match connect(addr).await {
                        Ok(s) => s,
                        Err(e) => {
                            f.error(format!("reconnect: {e}"));
                            tokio::time::sleep(Duration::from_millis(10)).await;
                            continue;
                        }
                    },
                };
                let path = if once {
                    let k = next.fetch_add(1, Ordering::Relaxed) as usize;
                    if k >= paths.len() {
                        break;
                    }
                    &paths[k]
                } else {
                    &paths[rng.usize(..paths.len())]
                };
                let sent = Instant::now();
                match tokio::time::timeout(REQUEST_TIMEOUT, exchange(&mut s, addr, path)).await {
                    Ok(Ok((status, size))) => {
                        let done = Instant::now();
                        f.latencies.push((done - sent).as_nanos() as u64);
                        if status.is_success() {
                            f.bytes += size as u64;
                            f.answers += 1;
                            f.completed += u64::from(done <= deadline);
                        } else {
                            f.error(format!("HTTP {status} for {path}"));
                        }
                        sender = Some(s);
                    }
                    Ok(Err(e)) => f.error(e),
                    Err(_) => f.error(format!("no answer within 30 s for {path}")),
                }
            }
            f
        });
    }
    let mut figures = ConnFigures::default();
    while let Some(done) = tasks.join_next().await {
        figures.merge(done.expect("a load task panicked"));
    }
    figures.latencies.sort_unstable();
    if started.elapsed() < window && window < WARM_UP_LIMIT {
        println!("    ({label}: every query sent before the end of the window)");
    }
    Load {
        label: label.to_owned(),
        figures,
        // Shorter when the queries ran out.
        window: window.min(started.elapsed()),
    }
}

// ---- the run ---------------------------------------------------------------------------

/// Every figure of the run, for the final summary.
struct Summary {
    listening_after: Duration,
    table_full_after: Duration,
    summaries_after: Option<Duration>,
    table: String,
    memory: Option<(u64, u64)>,
    memory_after_load: Option<(u64, u64)>,
    polls_served: u64,
    checks: (usize, usize),
    probe_startup: ProbeFigures,
    probe_after: ProbeFigures,
    loads: Vec<Load>,
    nginx: Result<Load, String>,
    hub_warnings: u64,
    hub_errors: u64,
    hub_stop: Option<(ExitStatus, Duration)>,
}

async fn run(settings: &Settings, mesh: Mesh, pools: Pools) -> Summary {
    // `BENCH_KEEP`: the hub's directory (configuration, log, spool) is left for a look.
    let dir = tempfile::Builder::new()
        .disable_cleanup(std::env::var_os("BENCH_KEEP").is_some())
        .tempdir()
        .expect("a temporary directory");
    let token = CancellationToken::new();
    let polls = Arc::new(AtomicU64::new(0));
    let (peer_addrs, churning) = start_peers(mesh.peers, polls.clone(), token.clone()).await;
    println!("{} fake peers listening", peer_addrs.len());

    // Without churn only the start-up polls happen.
    let poll = if churning.is_empty() {
        "1h".to_owned()
    } else {
        format!("{}ms", (settings.churn_poll * 1000.0) as u64)
    };
    let mut hub = start_hub(
        dir.path(),
        &peer_addrs,
        settings.conns,
        settings.entries,
        &poll,
    )
    .await;
    let addr = hub.addr;
    println!(
        "hub (pid {}) listening on http://{addr} after {}; log: {}",
        hub.proc.pid(),
        secs(hub.listening_after),
        hub.proc.log.display()
    );
    let stop_probe = CancellationToken::new();
    // The probe has a thread and a runtime of its own: on the bench's runtime its waits
    // would include the fake peers' sending of 10,000-entry hints on the same workers, which
    // is the bench's cost, not the hub's.
    let probe_task = {
        let paths = [pools.probe[0].path(None), pools.probe[1].path(None)];
        let (started, stop) = (hub.started, stop_probe.clone());
        std::thread::Builder::new()
            .name("probe".into())
            .spawn(move || {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("the probe's runtime starts")
                    .block_on(probe(addr, paths, started, stop))
            })
            .expect("the probe's thread starts")
    };
    println!(
        "probe: {} ({} peers) and {} ({} peer(s)) every {} ms",
        pools.probe[0].text,
        pools.probe[0].holders,
        pools.probe[1].text,
        pools.probe[1].holders,
        PROBE_PERIOD.as_millis()
    );

    let table_full_after = wait_for_table(&mut hub, settings.peers).await;
    println!("every peer in the table after {}", secs(table_full_after));
    let summaries_after = wait_for_summaries(&hub).await;
    match summaries_after {
        Some(d) => println!("substring summaries settled after {}", secs(d)),
        None => println!("substring summaries still pending after 120 s more"),
    }
    let page = metrics(addr).await.unwrap_or_default();
    let g = |n: &str| gauge(&page, n).unwrap_or(f64::NAN);
    // The README's sizing: 8 bytes per entry, per distinct value its bytes and 65, plus
    // the substring sums.
    let formula = 8.0 * g("cipd_table_entries")
        + g("cipd_table_value_bytes")
        + 65.0 * g("cipd_table_values")
        + g("cipd_table_summary_bytes");
    let table = format!(
        "{} peers, {} distinct values, {} entries, {:.1} MB (table's estimate), \
         {:.1} MB (README's sizing), {} summaries",
        g("cipd_table_peers"),
        g("cipd_table_values"),
        g("cipd_table_entries"),
        g("cipd_table_bytes") / 1e6,
        formula / 1e6,
        g("cipd_table_summaries"),
    );
    println!("table: {table}");
    let memory = settled_memory(hub.proc.pid()).await;
    if let Some((rss, hwm)) = memory {
        println!(
            "hub memory: settled VmRSS {} MiB ({:.2}x the README's sizing), import peak VmHWM \
             {} MiB ({:.2}x settled)",
            rss / 1024,
            rss as f64 * 1024.0 / formula,
            hwm / 1024,
            hwm as f64 / rss as f64,
        );
    }

    let checks = check_answers(addr, &pools).await;
    if !churning.is_empty() {
        let settled = memory.map_or(0, |m| m.0);
        churn(settings, &hub, &pools, &churning, settled).await;
    }

    let mut loads = Vec::new();
    for (label, paths, once) in pools.kinds() {
        if !settings.kinds.is_empty() && !settings.kinds.iter().any(|k| k == label) {
            continue;
        }
        if !once {
            // Steady state: every distinct query of the kind is asked once first, so that
            // the caches hold what they would after a while of this load (shown, not
            // counted).
            let mut distinct = paths.clone();
            distinct.sort_unstable();
            distinct.dedup();
            let warm = closed_loop(
                &format!("  warm-up ({} once)", distinct.len()),
                addr,
                distinct,
                true,
                settings.conns,
                WARM_UP_LIMIT,
            )
            .await;
            println!("{}", warm.row());
        }
        let load = closed_loop(
            label,
            addr,
            paths,
            once,
            settings.conns,
            settings.load_time(),
        )
        .await;
        println!("{}", load.row());
        if let Some(e) = &load.figures.first_error {
            println!("    first error: {e}");
        }
        loads.push(load);
    }
    let memory_after_load = memory_kib(hub.proc.pid());
    let page = metrics(addr).await.unwrap_or_default();
    let cache = gauge(&page, "cipd_table_substring_cache_bytes").unwrap_or(0.0);
    let answers = gauge(&page, "cipd_answer_cache_bytes").unwrap_or(0.0);
    if let Some((rss, _)) = memory_after_load {
        println!(
            "after the load: substring cache {:.1} MB ({} needles; {} hits, {} computed), \
             answer cache {:.1} MB, VmRSS {} MiB; RSS {:.2}x the README's sizing with the \
             caches",
            cache / 1e6,
            gauge(&page, "cipd_table_substring_cache_needles").unwrap_or(0.0),
            gauge(&page, "cipd_table_substring_cache_hits_total").unwrap_or(0.0),
            gauge(&page, "cipd_table_substring_cache_computed_total").unwrap_or(0.0),
            answers / 1e6,
            rss / 1024,
            rss as f64 * 1024.0 / (formula + cache + answers)
        );
    }
    stop_probe.cancel();
    let samples = probe_task.join().expect("the probe's thread panicked");
    print_probe_timeline(&samples, table_full_after);
    let probe_startup = ProbeFigures::of(samples.iter().filter(|s| s.at < table_full_after));
    let probe_after = ProbeFigures::of(samples.iter().filter(|s| s.at >= table_full_after));

    let hub_warnings = hub.warnings.load(Ordering::Relaxed);
    let hub_errors = hub.errors.load(Ordering::Relaxed);
    let hub_stop = hub.proc.stop();
    token.cancel();

    // The yardstick serves the size of the mean `mixed` answer (or of the first kind run).
    let mixed_size = loads
        .iter()
        .find(|l| l.label == "mixed")
        .or(loads.first())
        .map_or(0, |l| l.mean_size() as usize);
    let nginx = yardstick(settings, mixed_size).await;

    Summary {
        listening_after: hub.listening_after,
        table_full_after,
        summaries_after,
        table,
        memory,
        memory_after_load,
        polls_served: polls.load(Ordering::Relaxed),
        checks,
        probe_startup,
        probe_after,
        loads,
        nginx,
        hub_warnings,
        hub_errors,
        hub_stop,
    }
}

/// Polls `/metrics` until `cipd_table_peers` reaches `peers`; returns the time since the hub
/// started.
async fn wait_for_table(hub: &mut Hub, peers: usize) -> Duration {
    let mut last_report = Instant::now();
    let mut seen = 0.0;
    loop {
        if let Some(page) = metrics(hub.addr).await {
            seen = gauge(&page, "cipd_table_peers").unwrap_or(0.0);
            if seen >= peers as f64 {
                return hub.started.elapsed();
            }
        }
        if !hub.proc.running() {
            panic!("the hub exited while filling its table");
        }
        if hub.started.elapsed() > TABLE_DEADLINE {
            panic!("the table holds {seen} of {peers} peers after {TABLE_DEADLINE:?}");
        }
        if last_report.elapsed() > Duration::from_secs(5) {
            println!(
                "  {seen} of {peers} peers in the table at {}",
                secs(hub.started.elapsed())
            );
            last_report = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls `/metrics` until no summary build is pending (120 s at most).
async fn wait_for_summaries(hub: &Hub) -> Option<Duration> {
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline {
        // The start-up merge (cipd_cold_start) comes first, then its summaries.
        if let Some(page) = metrics(hub.addr).await
            && gauge(&page, "cipd_table_summaries_pending") == Some(0.0)
            && gauge(&page, "cipd_cold_start") != Some(1.0)
        {
            return Some(hub.started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

/// Compares a few answers' referral counts with what the generated hints imply; returns
/// (matching, checked).
async fn check_answers(addr: SocketAddr, pools: &Pools) -> (usize, usize) {
    let checks = pools.checks();
    let mut good = 0;
    for (label, query, limit) in &checks {
        let expected = query.expected(*limit);
        let got = match fetch(addr, &query.path(*limit)).await {
            Ok((status, body)) if status.is_success() => referral_count(&body),
            _ => None,
        };
        let verdict = if got == Some(expected) {
            good += 1;
            "ok"
        } else {
            "MISMATCH"
        };
        let got = got.map_or_else(|| "no answer".to_owned(), |n| n.to_string());
        let limit = limit.map(|n| format!(" limit={n}")).unwrap_or_default();
        println!(
            "check {label:<11} {}{limit}: {got} referrals, expected {expected} ({} holders): \
             {verdict}",
            query.text, query.holders
        );
    }
    (good, checks.len())
}

/// The probe's answers in the order they were sent, condensed: one line per second that
/// holds a wait over 100 ms, a timeout or a failure.
fn print_probe_timeline(samples: &[Sample], table_full: Duration) {
    let rare_found = samples
        .iter()
        .filter(|s| s.kind == 1)
        .filter(|s| matches!(s.outcome, Outcome::Answered { referrals, .. } if referrals > 0))
        .map(|s| s.at)
        .min();
    if let Some(at) = rare_found {
        println!(
            "probe: the rare value was first referred at {:.1} s (table full at {:.1} s)",
            at.as_secs_f64(),
            table_full.as_secs_f64()
        );
    }
    let mut slow: Vec<&Sample> = samples
        .iter()
        .filter(|s| match s.outcome {
            Outcome::Answered { wait, ok, .. } => !ok || wait > Duration::from_millis(100),
            _ => true,
        })
        .collect();
    slow.sort_by_key(|s| s.at);
    for s in slow.iter().take(20) {
        let what = match s.outcome {
            Outcome::Answered { wait, ok: true, .. } => format!("answered after {}", ms(wait)),
            Outcome::Answered { wait, .. } => format!("error status after {}", ms(wait)),
            Outcome::TimedOut => "no answer within 30 s".to_owned(),
            Outcome::Failed => "connection failed".to_owned(),
        };
        let kind = ["popular", "rare"][s.kind];
        println!("  probe {kind} sent at {:.1} s: {what}", s.at.as_secs_f64());
    }
    if slow.len() > 20 {
        println!("  ... and {} more slow probe answers", slow.len() - 20);
    }
}

/// The same load against nginx serving a static file of `size` bytes.
async fn yardstick(settings: &Settings, size: usize) -> Result<Load, String> {
    if !settings.nginx.exists() {
        let msg = format!(
            "nginx not found at {} (set CIPD_BENCH_NGINX, or install it: \
             `apt-get install nginx-light` or `apt-get install nginx`); no yardstick",
            settings.nginx.display()
        );
        println!("{msg}");
        return Err(msg);
    }
    let dir = tempfile::TempDir::new().expect("a temporary directory");
    let (mut nginx, addr) = start_nginx(&settings.nginx, dir.path(), size, settings.cpus).await;
    let load = closed_loop(
        &format!("nginx, {size} B file"),
        addr,
        vec!["/answer.json".to_owned()],
        false,
        settings.conns,
        settings.load_time(),
    )
    .await;
    println!("{}", load.row());
    nginx.stop();
    Ok(load)
}

impl Summary {
    fn print(&self, s: &Settings) {
        println!();
        println!("==== summary ====");
        println!(
            "{} peers x {} entries (skew {}, seed {}), {} connections, {} s per kind, {} CPUs",
            s.peers, s.entries, s.skew, s.seed, s.conns, s.secs, s.cpus
        );
        println!(
            "start-up: listening after {}, every peer in the table after {}{}",
            secs(self.listening_after),
            secs(self.table_full_after),
            self.summaries_after
                .map(|d| format!(", summaries settled after {}", secs(d)))
                .unwrap_or_default()
        );
        println!("table: {}", self.table);
        let mem = |m: Option<(u64, u64)>| {
            m.map_or_else(
                || "unknown".to_owned(),
                |(rss, hwm)| format!("VmRSS {} MiB, VmHWM {} MiB", rss / 1024, hwm / 1024),
            )
        };
        println!(
            "hub memory: settled {}; after the load {}",
            mem(self.memory),
            mem(self.memory_after_load)
        );
        if let Some((rss, hwm)) = self.memory {
            println!(
                "import peak: VmHWM {} MiB = {:.2}x the settled VmRSS {} MiB",
                hwm / 1024,
                hwm as f64 / rss as f64,
                rss / 1024
            );
        }
        println!(
            "polls served by the fake peers: {} (one per peer expected)",
            self.polls_served
        );
        println!(
            "answer checks: {} of {} as expected",
            self.checks.0, self.checks.1
        );
        println!(
            "probe until the table was full: {}",
            self.probe_startup.line()
        );
        println!("probe after (incl. the load):  {}", self.probe_after.line());
        println!(
            "hub log: {} warnings, {} errors; stopped by SIGTERM {}",
            self.hub_warnings,
            self.hub_errors,
            self.hub_stop.as_ref().map_or_else(
                || "(status unknown)".to_owned(),
                |(status, d)| format!("in {}: {status}", ms(*d))
            )
        );
        println!();
        println!("{}", Load::header());
        for l in &self.loads {
            println!("{}", l.row());
        }
        let hub = self
            .loads
            .iter()
            .find(|l| l.label == "mixed")
            .or(self.loads.first());
        match (&self.nginx, hub) {
            (Ok(n), Some(hub)) => {
                println!("{}", n.row());
                println!(
                    "hub {} / nginx: {:.1} % of the q/s; p50 x{:.1}, p99 x{:.1}",
                    hub.label,
                    100.0 * hub.qps() / n.qps().max(f64::MIN_POSITIVE),
                    ratio(hub.percentile(0.5), n.percentile(0.5)),
                    ratio(hub.percentile(0.99), n.percentile(0.99)),
                );
            }
            (Err(msg), _) => println!("{msg}"),
            (Ok(_), None) => println!("no load ran (BENCH_KINDS)"),
        }
    }
}

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64().max(1e-9)
}

fn ms(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1e3;
    if ms < 1.0 {
        format!("{ms:.3} ms")
    } else if ms < 100.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{ms:.0} ms")
    }
}

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}
