//! Several cipd nodes in one process, on 127.0.0.1:0, talking CIP to each other.
//!
//! Every wait is on a node's status channel (or re-checks on each status change) inside a
//! timeout that only bounds failure; nothing sleeps for a fixed time.

#![allow(missing_docs)]

mod abuse;
mod admin;
mod browser;
mod budget;
mod cip_http;
mod console;
mod cycles;
mod deltas;
mod depth;
mod fake;
mod faults;
mod flaky;
mod harness;
mod hinadi;
mod hinadi_readers;
mod https_feeds;
mod identity;
mod legacy;
mod load;
mod outbound;
mod proxy;
mod rdm;
mod roads;
mod scenarios;
mod search;
mod search_page;
mod tls;
mod trust;
