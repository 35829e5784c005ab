//! The attack shapes of issue 29 as a bench: a slow drip (1,200 CIP + 1,600 HTTP
//! connections, a byte every 2 s) and then a connect/close flood, both from 200 loopback
//! addresses (127.0.1.1-200), against a node with the default limits, while good clients
//! on 127.0.0.1 poll over CIP and query over HTTP one after the other. Prints the good
//! clients' success rates and what the listeners did (connections evicted, dropped at
//! accept).
//!
//! ```text
//! cargo bench -p integration-tests --bench overload     # OVERLOAD_SECONDS=10 by default
//! ```
//!
//! The `overload` test runs the same attack with short phases and asserts >= 99 %.

#[allow(dead_code)]
#[path = "../tests/overload/attack.rs"]
mod attack;

fn main() {
    let phase = attack::phase(10);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let f = runtime.block_on(attack::run(phase));
    println!();
    println!(
        "==== summary ({} s per phase, 2 node workers) ====",
        phase.as_secs()
    );
    println!(
        "{:<44} {:>16} {:>16}",
        "attack", "good CIP polls", "good HTTP queries"
    );
    let row = |what: &str, g: &attack::Good| {
        println!(
            "{what:<44} {:>9.1} % of {:<4} {:>9.1} % of {:<4}",
            g.cip_rate(),
            g.polls,
            g.http_rate(),
            g.queries
        );
    };
    row("slow drip, 200 addresses, 2,800 connections", &f.slow);
    row(
        &format!("connect/close flood, 200 addresses, {}", f.opened),
        &f.flood,
    );
    println!(
        "evicted during the drip (fresh): {} CIP, {} HTTP",
        f.evicted.0, f.evicted.1
    );
}
