//! The simulation's report beside the real run's, figure by figure, each judged against a
//! stated margin.

use std::fmt::Write as _;
use std::time::Duration;

use crate::sim::{Report, fmt_opt as ms};

/// How far a real figure may stray from the simulated one and still agree.
#[derive(Debug, Clone, Copy)]
pub struct Margins {
    /// Times (convergence, change-to-root): this much either way...
    pub time_abs: Duration,
    /// ...plus this share of the simulated time.
    pub time_rel: f64,
    /// Out-bound hint bytes and routing table entries: this share either way.
    pub size_rel: f64,
    /// Poll bytes and connections while changes go up: this share either way.
    pub traffic_rel: f64,
}

impl Default for Margins {
    /// The margins `docs/scale.md` states: sizes are the same bytes (the same data
    /// through the same code); times may differ by the watcher's phase (a leaf looks at
    /// its file every 100 ms, at an instant the simulation draws from its seed and the
    /// real run from the clock), a proxy hop per message and the CPU a simulation does not
    /// count; traffic by a poll or `datachanged` more or less when a notice meets a poll.
    fn default() -> Self {
        Self {
            time_abs: Duration::from_millis(150),
            time_rel: 0.5,
            size_rel: 0.0,
            traffic_rel: 0.25,
        }
    }
}

/// One compared figure.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// What it is.
    pub figure: String,
    /// Simulated.
    pub sim: String,
    /// Real.
    pub real: String,
    /// The margin it is held to.
    pub margin: String,
    /// Whether real is within the margin of sim (none: shown, not judged).
    pub within: Option<bool>,
}

fn mean(ds: &[Option<Duration>]) -> Option<Duration> {
    let all: Option<Vec<Duration>> = ds.iter().copied().collect();
    let all = all?;
    (!all.is_empty()).then(|| all.iter().sum::<Duration>() / all.len() as u32)
}

fn time_row(figure: &str, sim: Option<Duration>, real: Option<Duration>, m: &Margins) -> Row {
    let within = match (sim, real) {
        (Some(s), Some(r)) => {
            let allowed = m.time_abs + s.mul_f64(m.time_rel);
            Some(r.abs_diff(s) <= allowed)
        }
        _ => Some(false),
    };
    Row {
        figure: figure.to_owned(),
        sim: ms(sim),
        real: ms(real),
        margin: format!(
            "± {} ms + {:.0} %",
            m.time_abs.as_millis(),
            m.time_rel * 100.0
        ),
        within,
    }
}

fn share_row(figure: &str, sim: f64, real: f64, rel: f64) -> Row {
    let within = (real - sim).abs() <= rel * sim.abs() + 1e-9;
    Row {
        figure: figure.to_owned(),
        sim: format!("{sim:.0}"),
        real: format!("{real:.0}"),
        margin: if rel == 0.0 {
            "equal".to_owned()
        } else {
            format!("± {:.0} %", rel * 100.0)
        },
        within: Some(within),
    }
}

/// Every compared figure of `sim` and `real` (two runs of one plan).
pub fn compare(sim: &Report, real: &Report, m: &Margins) -> Vec<Row> {
    let mut rows = vec![
        Row {
            figure: "every table exact; root entries matched / expected, extra".to_owned(),
            sim: format!(
                "{}; {}/{}, {}",
                sim.all_exact, sim.root_matched, sim.root_expected, sim.root_extra
            ),
            real: format!(
                "{}; {}/{}, {}",
                real.all_exact, real.root_matched, real.root_expected, real.root_extra
            ),
            margin: "equal".to_owned(),
            within: Some(
                sim.all_exact == real.all_exact
                    && (sim.root_matched, sim.root_expected, sim.root_extra)
                        == (real.root_matched, real.root_expected, real.root_extra),
            ),
        },
        time_row(
            "convergence from cold",
            sim.converged_at,
            real.converged_at,
            m,
        ),
        time_row(
            &format!("leaf change to root, mean of {}", sim.changes.len()),
            mean(&sim.changes),
            mean(&real.changes),
            m,
        ),
    ];
    for (s, r) in sim.levels.iter().zip(&real.levels) {
        let l = s.level;
        rows.push(share_row(
            &format!("level {l}: out-bound hint bytes, mean"),
            s.hint_bytes.0,
            r.hint_bytes.0,
            m.size_rel,
        ));
        if s.table_entries.1 > 0 {
            rows.push(share_row(
                &format!("level {l}: table entries, mean"),
                s.table_entries.0,
                r.table_entries.0,
                m.size_rel,
            ));
            for (what, sv, rv) in [
                ("table values", s.table_values.0, r.table_values.0),
                ("table bytes", s.table_bytes.0, r.table_bytes.0),
            ] {
                let mut row = share_row(&format!("level {l}: {what}, mean"), sv, rv, 0.0);
                // A value counts once per index segment until segments merge, and which
                // merged depends on the order the hints arrived in: shown only.
                row.margin = "shown".to_owned();
                row.within = None;
                rows.push(row);
            }
        }
        for (what, sv, rv) in [
            ("poll bytes in", s.poll_bytes_in, r.poll_bytes_in),
            ("connections opened", s.connections, r.connections),
        ] {
            let mut row = share_row(
                &format!("level {l}: {what} from cold"),
                sv as f64,
                rv as f64,
                m.traffic_rel,
            );
            // How many polls a cold start takes depends on how the imports below spread
            // in time, which CPU does and the simulation does not count: shown only.
            row.margin = "shown".to_owned();
            row.within = None;
            rows.push(row);
        }
        if let (Some(sc), Some(rc)) = (sim.change_traffic.get(l), real.change_traffic.get(l)) {
            rows.push(share_row(
                &format!("level {l}: poll bytes in while changes went up"),
                sc.0 as f64,
                rc.0 as f64,
                m.traffic_rel,
            ));
            rows.push(share_row(
                &format!("level {l}: connections while changes went up"),
                sc.1 as f64,
                rc.1 as f64,
                m.traffic_rel,
            ));
        }
    }
    if let (Some(ss), Some(rs)) = (&sim.sustained, &real.sustained) {
        rows.push(time_row(
            &format!(
                "{} sustained changes: every table exact after the last",
                ss.changes
            ),
            ss.exact_after,
            rs.exact_after,
            m,
        ));
        let root = |o: &crate::sim::SustainedOutcome| {
            o.traffic.first().map_or(0.0, |t| t.0 as f64) / o.changes.max(1) as f64
        };
        rows.push(share_row(
            "sustained: root poll bytes in per change",
            root(ss),
            root(rs),
            m.traffic_rel,
        ));
    }
    for (s, r) in sim.faults.iter().zip(&real.faults) {
        rows.push(Row {
            figure: format!("{} at n{}: exact again after", s.fault, s.node),
            sim: ms(s.recovered_after),
            real: ms(r.recovered_after),
            margin: "shown".to_owned(),
            within: (s.recovered_after.is_none() || r.recovered_after.is_none()).then_some(false),
        });
        // A blackhole is found by the stall timeout on both sides: judged like any time.
        if matches!(s.fault, crate::sim::Fault::Blackhole(_)) {
            rows.push(time_row(
                &format!("{} at n{}: the poll in it failed after", s.fault, s.node),
                s.detected_after,
                r.detected_after,
                m,
            ));
        }
    }
    rows
}

/// Whether every judged row agrees.
pub fn agree(rows: &[Row]) -> bool {
    rows.iter().all(|r| r.within != Some(false))
}

/// The rows as a Markdown table.
pub fn render(rows: &[Row]) -> String {
    let mut s =
        String::from("| figure | simulated | real | margin | agrees |\n|---|---|---|---|---|\n");
    for r in rows {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} |",
            r.figure,
            r.sim,
            r.real,
            r.margin,
            match r.within {
                Some(true) => "yes",
                Some(false) => "**no**",
                None => "-",
            }
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_held_to_absolute_plus_relative() {
        let m = Margins::default();
        let ok = time_row(
            "t",
            Some(Duration::from_millis(200)),
            Some(Duration::from_millis(440)),
            &m,
        );
        assert_eq!(ok.within, Some(true));
        let late = time_row(
            "t",
            Some(Duration::from_millis(200)),
            Some(Duration::from_millis(460)),
            &m,
        );
        assert_eq!(late.within, Some(false));
        let never = time_row("t", Some(Duration::from_millis(200)), None, &m);
        assert_eq!(never.within, Some(false));
    }

    #[test]
    fn sizes_must_be_equal_and_traffic_near() {
        assert_eq!(share_row("s", 1000.0, 1000.0, 0.0).within, Some(true));
        assert_eq!(share_row("s", 1000.0, 1001.0, 0.0).within, Some(false));
        assert_eq!(share_row("t", 1000.0, 1240.0, 0.25).within, Some(true));
        assert_eq!(share_row("t", 1000.0, 1260.0, 0.25).within, Some(false));
        assert!(agree(&[share_row("s", 1.0, 1.0, 0.0)]));
        assert!(!agree(&[share_row("s", 1.0, 2.0, 0.0)]));
    }
}
