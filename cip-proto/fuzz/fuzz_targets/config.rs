//! Fuzzes cipd's configuration file reader: TOML text to a validated `Config`.
//!
//! The input, when UTF-8, is the file's text. Checks: no panic, whatever the text; a
//! configuration that does not validate says at least one thing that is wrong, and any
//! line and column it gives lie inside the text; parsing is deterministic.

#![no_main]

use cipd::model::config::Config;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match Config::from_toml(text) {
        Ok(config) => {
            // Validation is a pure function of the text.
            let again = Config::from_toml(text).expect("the same text validates twice");
            assert_eq!(format!("{again:?}"), format!("{config:?}"));
        }
        Err(e) => {
            let problems = e.problems();
            assert!(
                !problems.is_empty(),
                "an invalid configuration names no problem"
            );
            let lines = text.split('\n').count();
            for p in problems {
                assert!(!p.message.is_empty(), "problem without a message: {p:?}");
                if let Some((line, col)) = p.position {
                    assert!(line >= 1 && line <= lines, "line {line} of {lines}: {p}");
                    let len = text.split('\n').nth(line - 1).map_or(0, |l| l.len());
                    assert!(col >= 1 && col <= len + 1, "column {col} of {len}: {p}");
                }
            }
            let _ = e.to_string();
        }
    }
});
