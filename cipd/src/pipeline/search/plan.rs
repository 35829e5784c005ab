//! A search's plan at one node, with no I/O: which targets go first ([`compare`]), how many
//! go out together ([`wave_size`]) and how the budget of sub-queries is shared among them
//! ([`split_budget`]).
//!
//! Targets go in waves by rank: the best-ranked referrals first, as many as the hints say
//! hold the objects still wanted, wider only while fewer than `limit` objects came back.
//! Possible referrals (whose thresholds may hide matches) follow the definite ones, then
//! the servers a Whois++ server named, then the nodes that poll this one (whose content no
//! hint here describes). Among targets of equal rank the faster answers first (the
//! infrastructure cache's smoothed round-trip time), as unbound and Knot Resolver prefer
//! the fastest of equally good servers.

use std::time::Duration;

/// Which way a sub-query goes from the node that sends it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Hop {
    /// To a node this node's routing table refers to (below it).
    Down,
    /// To a server a Whois++ server's `# SERVER-TO-ASK` named.
    ServerToAsk,
    /// To a node that polls this one (above it): RFC 1913's POLLED-BY widening.
    Up,
}

impl Hop {
    /// The spelling in answers and in the `CIP-Search-Direction` header.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Down => "down",
            Self::ServerToAsk => "server-to-ask",
            Self::Up => "up",
        }
    }
}

/// One node a search may ask next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Its DSI.
    pub dsi: String,
    /// Its base-URIs, as its hint (or its polls) gave them.
    pub base_uris: Vec<String>,
    /// Objects its hint says match (0: unknown).
    pub count: u64,
    /// Its hint's values matched every term.
    pub definite: bool,
    /// Which way it lies.
    pub hop: Hop,
    /// Datasets below it (its hint's provenance, less itself): how many sub-queries it may
    /// need.
    pub datasets: u32,
    /// Changes whenever its hint does: a cached answer of it is valid while this holds.
    pub stamp: Option<u64>,
    /// Its smoothed round-trip time, when known.
    pub srtt: Option<Duration>,
}

fn class(t: &Target) -> u8 {
    match (t.hop, t.definite) {
        (Hop::Down, true) => 0,
        (Hop::Down, false) => 1,
        (Hop::ServerToAsk, _) => 2,
        (Hop::Up, _) => 3,
    }
}

/// The order targets are asked in: by class (definite, possible, server-to-ask, up), then
/// by count (best first), then the faster first (unknown round-trip times last among
/// equals); a stable sort keeps the table's own order among the rest.
pub fn compare(a: &Target, b: &Target) -> std::cmp::Ordering {
    class(a)
        .cmp(&class(b))
        .then(b.count.cmp(&a.count))
        .then_with(|| match (a.srtt, b.srtt) {
            (Some(x), Some(y)) => x.cmp(&y),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => std::cmp::Ordering::Equal,
        })
}

/// How many targets from the front of `queue` (in asking order) go in the next wave: they
/// are taken while the counts of those taken promise fewer than `need` objects (so targets
/// of unknown count join until then), at least one, and at most `budget`.
pub fn wave_size<'a>(queue: impl IntoIterator<Item = &'a Target>, need: u64, budget: u32) -> usize {
    let mut taken = 0usize;
    let mut promised = 0u64;
    for t in queue {
        if (taken as u64) >= u64::from(budget) || (taken > 0 && promised >= need) {
            break;
        }
        promised = promised.saturating_add(t.count);
        taken += 1;
    }
    taken
}

/// Shares `leftover` sub-queries among a wave's targets. A target below this node may need
/// one per dataset its hint aggregates (`datasets`): those needs are met first
/// (proportionally when `leftover` cannot meet them all); what remains goes to the nodes
/// above (whose part of the mesh no hint here measures), or, when the wave has none, evenly
/// to all. The shares never add up to more than `leftover`.
pub fn split_budget(leftover: u32, wave: &[Target]) -> Vec<u32> {
    let n = wave.len();
    let mut shares = vec![0u32; n];
    if n == 0 || leftover == 0 {
        return shares;
    }
    let needs: Vec<u64> = wave
        .iter()
        .map(|t| {
            if t.hop == Hop::Up {
                0
            } else {
                u64::from(t.datasets)
            }
        })
        .collect();
    let total_need: u64 = needs.iter().sum();
    let mut left = u64::from(leftover);
    if total_need > 0 {
        if total_need <= left {
            for (s, &need) in shares.iter_mut().zip(&needs) {
                *s = u32::try_from(need).unwrap_or(u32::MAX);
            }
            left -= total_need;
        } else {
            // Proportional shares, the remainder to the biggest needs first.
            let mut given = 0u64;
            for (s, &need) in shares.iter_mut().zip(&needs) {
                let share = left * need / total_need;
                *s = u32::try_from(share).unwrap_or(u32::MAX);
                given += share;
            }
            let mut by_need: Vec<usize> = (0..n).filter(|&i| needs[i] > 0).collect();
            by_need.sort_by(|&a, &b| needs[b].cmp(&needs[a]));
            let mut rest = left - given;
            for i in by_need.into_iter().cycle().take(n * 2) {
                if rest == 0 {
                    break;
                }
                if u64::from(shares[i]) < needs[i] {
                    shares[i] += 1;
                    rest -= 1;
                }
            }
            left = rest;
        }
    }
    if left == 0 {
        return shares;
    }
    let ups: Vec<usize> = (0..n).filter(|&i| wave[i].hop == Hop::Up).collect();
    let takers: Vec<usize> = if ups.is_empty() {
        (0..n).collect()
    } else {
        ups
    };
    let k = takers.len() as u64;
    for (j, &i) in takers.iter().enumerate() {
        let extra = left / k + u64::from((j as u64) < left % k);
        shares[i] = shares[i].saturating_add(u32::try_from(extra).unwrap_or(u32::MAX));
    }
    shares
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(dsi: &str, count: u64, definite: bool, hop: Hop, datasets: u32) -> Target {
        Target {
            dsi: dsi.into(),
            base_uris: vec![format!("http://{dsi}/")],
            count,
            definite,
            hop,
            datasets,
            stamp: None,
            srtt: None,
        }
    }

    #[test]
    fn order_by_class_count_then_speed() {
        let mut v = [
            t("up", 0, false, Hop::Up, 0),
            t("possible", 0, false, Hop::Down, 0),
            t("small", 2, true, Hop::Down, 0),
            t("big-slow", 9, true, Hop::Down, 0),
            t("big-fast", 9, true, Hop::Down, 0),
            t("big-unknown", 9, true, Hop::Down, 0),
        ];
        v[3].srtt = Some(Duration::from_millis(50));
        v[4].srtt = Some(Duration::from_millis(5));
        v.sort_by(compare);
        let names: Vec<_> = v.iter().map(|t| t.dsi.as_str()).collect();
        assert_eq!(
            names,
            [
                "big-fast",
                "big-slow",
                "big-unknown",
                "small",
                "possible",
                "up"
            ]
        );
    }

    #[test]
    fn waves_widen_only_as_needed() {
        let q = [
            t("a", 30, true, Hop::Down, 0),
            t("b", 30, true, Hop::Down, 0),
            t("c", 5, true, Hop::Down, 0),
            t("up", 0, false, Hop::Up, 0),
        ];
        assert_eq!(wave_size(&q, 50, 32), 2, "a and b promise 60 >= 50");
        assert_eq!(
            wave_size(&q[2..], 10, 32),
            2,
            "c promises 5 < 10: the node above joins"
        );
        let q: Vec<_> = (0..10)
            .map(|i| t(&i.to_string(), 0, true, Hop::Down, 0))
            .collect();
        assert_eq!(wave_size(&q, 100, 3), 3, "at most the budget");
        assert_eq!(wave_size(&q, 0, 3), 1, "at least one");
        assert_eq!(wave_size(&q, 100, 0), 0, "none without budget");
    }

    #[test]
    fn budget_meets_needs_then_goes_up() {
        // A middle node asked from below: four leaves (no need) and the root above.
        let wave = [
            t("l1", 1, true, Hop::Down, 0),
            t("l2", 1, true, Hop::Down, 0),
            t("mid", 1, true, Hop::Down, 5),
            t("root", 0, false, Hop::Up, 0),
        ];
        assert_eq!(split_budget(26, &wave), [0, 0, 5, 21]);
        // Short: proportional to need, never more than there is.
        let wave = [
            t("m1", 1, true, Hop::Down, 5),
            t("m2", 1, true, Hop::Down, 5),
            t("m3", 1, true, Hop::Down, 2),
        ];
        let s = split_budget(7, &wave);
        assert_eq!(s.iter().sum::<u32>(), 7);
        assert_eq!(s, [3, 3, 1]);
        // Spare budget with no node above: shared evenly.
        let s = split_budget(5, &wave[..2]);
        assert_eq!(s.iter().sum::<u32>(), 5);
        assert_eq!(split_budget(0, &wave), [0, 0, 0]);
    }

    #[test]
    fn shares_never_exceed_the_leftover() {
        for leftover in 0..40u32 {
            for n in 1..6u32 {
                let wave: Vec<_> = (0..n)
                    .map(|i| {
                        let hop = if i == n - 1 { Hop::Up } else { Hop::Down };
                        t(&i.to_string(), 1, true, hop, i * 3)
                    })
                    .collect();
                let s = split_budget(leftover, &wave);
                assert!(s.iter().sum::<u32>() <= leftover, "{leftover} {n} {s:?}");
            }
        }
    }
}
