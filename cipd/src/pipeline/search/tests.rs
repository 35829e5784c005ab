//! The search's decisions at one node, with a host whose answers are fixed and targets
//! that are never reached over the network (refused, known down, or cut by the depth,
//! budget or limit). Chasing over the network is tested on real meshes in
//! `integration-tests/tests/mesh/search.rs`.

use std::sync::Arc;
use std::time::Duration;

use super::ask::sub_key;
use super::endpoint::{Endpoint, origin};
use super::*;
use crate::model::answer::{FoundObject, NotChased};

struct Fixed {
    objects: usize,
    down: Vec<Target>,
    up: Vec<Target>,
    metrics: Metrics,
}

fn target(dsi: &str, uri: &str, count: u64, hop: Hop) -> Target {
    Target {
        dsi: dsi.into(),
        base_uris: vec![uri.into()],
        count,
        definite: true,
        hop,
        datasets: 0,
        stamp: None,
        srtt: None,
    }
}

impl SearchHost for Fixed {
    fn identity(&self) -> (String, String) {
        ("1.1".into(), "http://self.example/".into())
    }

    fn search_config(&self) -> Arc<SearchConfig> {
        Arc::new(SearchConfig::default())
    }

    fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    async fn local_objects(
        &self,
        _query: &Query,
        limit: usize,
    ) -> Result<(Vec<ObjectJson>, u64), String> {
        let all: Vec<ObjectJson> = (0..self.objects)
            .map(|i| ObjectJson {
                template: "DOCUMENT".into(),
                url: format!("http://self.example/{i}"),
                attributes: vec![("Author".into(), "Garcia".into())],
            })
            .collect();
        Ok((all.into_iter().take(limit).collect(), self.objects as u64))
    }

    async fn referrals(&self, _query: &Query) -> Result<Vec<Target>, String> {
        Ok(self.down.clone())
    }

    fn upstreams(&self) -> Vec<Target> {
        self.up.clone()
    }

    fn may_contact(&self, host: &str, _port: u16) -> Result<(), String> {
        if host.ends_with(".hostile") {
            Err(format!("{host} is not a peer's host"))
        } else {
            Ok(())
        }
    }
}

fn searcher() -> Searcher {
    let client = client(&crate::model::config::HttpClientConfig::default()).unwrap();
    Searcher::new(&SearchConfig::default(), client)
}

fn request(direction: Direction) -> SearchRequest {
    SearchRequest {
        query: "Author=Garcia".into(),
        parsed: Query::parse("Author=Garcia").unwrap(),
        limit: 10,
        deadline: Instant::now() + Duration::from_secs(2),
        depth: 4,
        budget: 8,
        visited: BTreeSet::new(),
        direction,
        hop: 0,
        trace: TraceContext::new(),
    }
}

fn reasons(a: &SearchAnswer) -> Vec<(&str, NotChased)> {
    a.unchased
        .iter()
        .map(|u| (u.dsi.as_str(), u.reason))
        .collect()
}

#[tokio::test]
async fn refused_targets_are_never_asked() {
    let host = Fixed {
        objects: 1,
        down: vec![
            target("2.1", "http://x.hostile/", 5, Hop::Down),
            target("2.2", "ftp://peer.example/", 4, Hop::Down),
            target("2.3", "not a uri", 3, Hop::Down),
        ],
        up: Vec::new(),
        metrics: Metrics::default(),
    };
    let a = searcher().search(&host, request(Direction::Entry)).await;
    assert_eq!(
        reasons(&a),
        [
            ("2.1", NotChased::Refused),
            ("2.2", NotChased::Refused),
            ("2.3", NotChased::Refused)
        ]
    );
    assert!(
        a.unchased[0]
            .detail
            .as_deref()
            .unwrap()
            .contains("not a peer's host")
    );
    assert!(
        a.unchased[1]
            .detail
            .as_deref()
            .unwrap()
            .contains("speaks http")
    );
    assert!(a.partial && a.nodes.is_empty() && a.subqueries == 0);
    assert_eq!(a.objects.len(), 1);
    assert_eq!(a.objects[0].holder, "1.1");
}

#[tokio::test]
async fn a_node_whose_failure_is_cached_is_left_alone() {
    let s = searcher();
    s.health
        .note_failure("http://dead.example:80", "connection refused");
    let host = Fixed {
        objects: 0,
        down: vec![target("2.1", "http://dead.example/", 5, Hop::Down)],
        up: Vec::new(),
        metrics: Metrics::default(),
    };
    let a = s.search(&host, request(Direction::Entry)).await;
    assert_eq!(reasons(&a), [("2.1", NotChased::Unreachable)]);
    let detail = a.unchased[0].detail.as_deref().unwrap();
    assert!(
        detail.contains("connection refused") && detail.contains("not asked again"),
        "{detail}"
    );
    assert_eq!(a.subqueries, 0);
}

#[tokio::test]
async fn depth_budget_and_limit_stop_the_chase() {
    let down = vec![
        target("2.1", "http://a.example/", 5, Hop::Down),
        target("2.2", "http://b.example/", 4, Hop::Down),
    ];
    let host = Fixed {
        objects: 0,
        down: down.clone(),
        up: Vec::new(),
        metrics: Metrics::default(),
    };
    let mut r = request(Direction::Entry);
    r.depth = 0;
    let a = searcher().search(&host, r).await;
    assert_eq!(
        reasons(&a),
        [("2.1", NotChased::Depth), ("2.2", NotChased::Depth)]
    );
    assert!(a.partial);

    let mut r = request(Direction::Entry);
    r.budget = 0;
    let a = searcher().search(&host, r).await;
    assert_eq!(
        reasons(&a),
        [("2.1", NotChased::Budget), ("2.2", NotChased::Budget)]
    );
    assert_eq!(
        host.metrics.search.unchased[0].get(),
        2,
        "counted by reason"
    );

    // Local objects fill the limit: nothing else is needed, and nothing is missing.
    let host = Fixed {
        objects: 12,
        down,
        up: Vec::new(),
        metrics: Metrics::default(),
    };
    let a = searcher().search(&host, request(Direction::Entry)).await;
    assert_eq!(a.objects.len(), 10);
    assert_eq!(
        reasons(&a),
        [("2.1", NotChased::Limit), ("2.2", NotChased::Limit)]
    );
    assert!(!a.partial && a.more);
}

#[tokio::test]
async fn visited_nodes_are_skipped_and_up_is_only_for_searches_from_below() {
    let host = Fixed {
        objects: 0,
        down: vec![
            target("2.1", "http://a.example/", 5, Hop::Down),
            target("1.1", "http://self.example/", 5, Hop::Down),
        ],
        up: vec![target("3.1", "http://up.hostile/", 0, Hop::Up)],
        metrics: Metrics::default(),
    };
    let mut r = request(Direction::Down);
    r.visited.insert("2.1".into());
    let a = searcher().search(&host, r).await;
    assert_eq!(a.skipped, ["2.1"]);
    assert!(
        a.unchased.is_empty(),
        "the node above is not for a search from above"
    );
    assert!(!a.partial);

    let mut r = request(Direction::Up);
    r.visited.insert("2.1".into());
    let a = searcher().search(&host, r).await;
    assert_eq!(reasons(&a), [("3.1", NotChased::Refused)]);
}

#[test]
fn endpoints_and_their_keys() {
    assert_eq!(
        origin("http://h.example/x/").as_deref(),
        Some("http://h.example:80")
    );
    assert_eq!(
        origin("https://h.example:8443/").as_deref(),
        Some("https://h.example:8443")
    );
    let e = Endpoint::Whois {
        host: "127.0.0.1".into(),
        port: 63,
    };
    assert_eq!(e.key(), "whoispp://127.0.0.1:63");
    assert_eq!(e.uri(), "whoispp://127.0.0.1:63/");
    assert_eq!(Direction::parse(" up "), Some(Direction::Up));
    assert_eq!(Direction::parse("sideways"), None);
}

#[tokio::test(start_paused = true)]
async fn a_failed_node_s_last_answer_is_served_stale() {
    let s = searcher();
    let dead = target("2.1", "http://dead.example/", 5, Hop::Down);
    let endpoint = Endpoint::Http("http://dead.example/".into());
    let mut kept = SearchAnswer {
        query: "Author=Garcia".into(),
        dsi: "2.1".into(),
        trace_id: String::new(),
        objects: Vec::new(),
        more: false,
        unchased: Vec::new(),
        partial: false,
        stale: false,
        nodes: Vec::new(),
        skipped: Vec::new(),
        subqueries: 0,
        elapsed_ms: 1.0,
    };
    kept.objects.push(FoundObject {
        holder: "2.1".into(),
        holder_uri: "http://dead.example/".into(),
        template: "DOCUMENT".into(),
        url: "http://dead.example/1".into(),
        attributes: Vec::new(),
    });
    s.subs.put(
        sub_key(&endpoint, Direction::Down, 10, "Author=Garcia"),
        Arc::new(CachedSub {
            answer: Arc::new(kept),
            more: Vec::new(),
            stamp: None,
        }),
    );
    // Past the cache's TTL: a fresh answer is wanted, but the node is down.
    tokio::time::advance(Duration::from_secs(120)).await;
    s.health
        .note_failure("http://dead.example:80", "connection refused");
    let host = Fixed {
        objects: 0,
        down: vec![dead.clone()],
        up: Vec::new(),
        metrics: Metrics::default(),
    };
    let a = s.search(&host, request(Direction::Entry)).await;
    assert!(a.unchased.is_empty(), "{:?}", a.unchased);
    assert!(a.stale && !a.partial);
    assert_eq!(a.objects.len(), 1);
    assert_eq!(a.nodes[0].outcome, "stale");
    assert!(
        a.nodes[0]
            .error
            .as_deref()
            .unwrap()
            .contains("connection refused")
    );
    assert_eq!(a.subqueries, 0, "served without asking");

    // Past search.stale_ttl it is not served: the node is reported unreachable.
    tokio::time::advance(Duration::from_secs(3600)).await;
    s.health
        .note_failure("http://dead.example:80", "connection refused");
    let a = s.search(&host, request(Direction::Entry)).await;
    assert_eq!(reasons(&a), [("2.1", NotChased::Unreachable)]);
    assert!(!a.stale && a.partial);
}
