//! Fuzzes the RDM message parser.
//!
//! Checks: no panic; a message that parses writes back to one that parses to itself.

#![no_main]

use cip_proto::rdm::Message;
use cip_proto::soif::Limits;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let limits = Limits {
        max_value_size: 4096,
        max_attributes: 64,
        max_object_size: 16384,
        max_token_len: 256,
    };
    let Ok(m) = Message::parse(data.to_vec(), limits) else {
        return;
    };
    let again = Message::parse(m.write(), Limits::default()).expect("written messages parse");
    assert_eq!(again, m, "parse -> write -> parse");
});
