//! A Whois++ server's answer read as a sub-query's answer: the records of its dataset that
//! match, and the servers it names to ask next.

use hints::query::Query;

use super::endpoint::Queued;
use super::plan::{Hop, Target};
use super::remote;
use crate::model::answer::{FoundObject, SearchAnswer};

/// A Whois++ server's answer as a search answer of its dataset, and the servers it named.
pub(super) fn from_whois(
    w: cip_proto::whoispp_answer::WhoisAnswer,
    queued: &Queued,
    query: &str,
    parsed: &Query,
    limit: usize,
) -> (SearchAnswer, Vec<Target>) {
    let uri = queued.endpoint.uri();
    let objects: Vec<FoundObject> = w
        .records
        .into_iter()
        .filter(|r| remote::record_matches(r, parsed))
        .take(limit)
        .map(|r| {
            let url = r
                .attributes
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case("uri") || n.eq_ignore_ascii_case("url"))
                .map(|(_, v)| v.clone())
                .unwrap_or_else(|| format!("{uri}{}", r.handle));
            FoundObject {
                holder: queued.target.dsi.clone(),
                holder_uri: uri.clone(),
                template: r.template,
                url,
                attributes: r.attributes,
            }
        })
        .collect();
    let more = w
        .referrals
        .into_iter()
        .filter_map(|s| {
            let port = s.port?;
            Some(Target {
                dsi: s.handle,
                base_uris: vec![format!("whoispp://{}:{port}/", s.host)],
                count: 0,
                definite: false,
                hop: Hop::ServerToAsk,
                datasets: 0,
                stamp: None,
                srtt: None,
            })
        })
        .collect();
    let answer = SearchAnswer {
        query: query.to_owned(),
        dsi: queued.target.dsi.clone(),
        trace_id: String::new(),
        objects,
        more: false,
        unchased: Vec::new(),
        partial: false,
        stale: false,
        nodes: Vec::new(),
        skipped: Vec::new(),
        subqueries: 0,
        elapsed_ms: 0.0,
    };
    (answer, more)
}
