//! Overload from many addresses (issue 29): a slow-drip attacker on 200 loopback addresses
//! (127.0.1.x) wanting more than every CIP and HTTP slot of a node with the default limits,
//! then a connect/close flood from the same addresses, while good clients on 127.0.0.1 poll
//! over CIP and query over HTTP. The per-address caps cannot help here (each attacking
//! address stays under them); what keeps the good clients served is that a new connection
//! takes the slot of the oldest one that has not completed a request (see
//! `cipd::front::conn_limit`). The good clients must see at least 99 % success.
//!
//! A test binary of its own, so no other test shares the machine's cores while it runs.
//! `OVERLOAD_SECONDS` (default 4) sets each phase's length; the figures are printed
//! (`cargo test -p integration-tests --test overload -- --nocapture`); the `overload`
//! bench runs the same attack over longer phases.

mod attack;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn good_clients_are_served_through_a_slow_drip_and_a_flood_from_200_addresses() {
    let f = attack::run(attack::phase(4)).await;
    for (what, g) in [("slow drip", &f.slow), ("flood", &f.flood)] {
        assert!(
            g.polls >= 10 && g.queries >= 10,
            "{what}: too few tries: {g:?}"
        );
        assert!(
            g.cip_rate() >= 99.0 && g.http_rate() >= 99.0,
            "{what}: good clients below 99 %: {g:?}"
        );
    }
    assert!(f.evicted.0 > 0.0 && f.evicted.1 > 0.0, "{}", f.page);
    assert!(f.opened > 1000, "the flood opened {} connections", f.opened);
}
