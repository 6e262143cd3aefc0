//! One row of the goals table ([`Goal`]), what its ratio must be
//! ([`Target`]), and whether it is met: a goal counts as met when it holds
//! in every round of the benchmark. Each row carries the latchkey figure
//! and the reference figure of every round (measured in the same
//! interleaved rounds, so round i of both saw the same noise), and "met"
//! judges each round's ratio: "yes" only when every round meets the goal
//! ("yes (stretch too)" only when every round meets the stretch goal),
//! "no (k of n rounds)" when only some do, "no" when none does. A NaN
//! round (no figure) does not meet it. A row without rounds is judged on
//! its ratio (of medians, or of pooled figures) alone, and says so.
//!
//! No other module of the benchmark is used here: this file is also the
//! test target `latchkey-bench-verdict` (see Cargo.toml), which runs its
//! tests, since the benchmark's own target has no test harness.

/// What the ratio latchkey ÷ reference must be.
#[derive(Clone, Copy, Debug)]
pub enum Target {
    /// At least the first; the second is a stretch goal.
    AtLeast(f64, Option<f64>),
    AtMost(f64),
    /// The issue sets no figure: measured, not judged.
    None,
}

/// One row of the goals table.
#[derive(Clone, Debug)]
pub struct Goal {
    pub measure: String,
    /// The median over rounds (or the figure pooled over every round).
    pub latchkey: f64,
    /// The same for the reference.
    pub reference: f64,
    /// Digits of the two figures.
    pub decimals: usize,
    pub target: Target,
    /// (latchkey, reference) of each round, in round order (empty: the
    /// row has no figures of its own rounds).
    pub rounds: Vec<(f64, f64)>,
}

/// How far one ratio goes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    No,
    Yes,
    Stretch,
}

impl Target {
    /// How far `ratio` goes; a ratio that is not a number (a figure
    /// missing, or a reference of 0) goes nowhere. [`Target::None`] judges
    /// nothing (see [`Goal::met`]).
    fn level(self, ratio: f64) -> Level {
        let met = |yes: bool| if yes { Level::Yes } else { Level::No };
        match self {
            _ if !ratio.is_finite() => Level::No,
            Target::AtLeast(_, Some(s)) if ratio >= s => Level::Stretch,
            Target::AtLeast(x, _) => met(ratio >= x),
            Target::AtMost(x) => met(ratio <= x),
            Target::None => Level::No,
        }
    }
}

impl Goal {
    /// latchkey ÷ reference of the row's main figures.
    pub fn ratio(&self) -> f64 {
        self.latchkey / self.reference
    }

    /// latchkey ÷ reference of each round, in round order.
    pub fn round_ratios(&self) -> Vec<f64> {
        self.rounds.iter().map(|(l, r)| l / r).collect()
    }

    /// The goal as printed.
    pub fn goal(&self) -> String {
        match self.target {
            Target::AtLeast(x, None) => format!("≥ {x}"),
            Target::AtLeast(x, Some(s)) => format!("≥ {x} (stretch {s})"),
            Target::AtMost(x) => format!("≤ {x}"),
            Target::None => "none set".to_string(),
        }
    }

    /// Each round's ratio with two decimals, " / " between them; "—"
    /// where the row has no rounds (and for a round with no figure).
    pub fn rounds_column(&self) -> String {
        if self.rounds.is_empty() {
            return "—".to_string();
        }
        let ratio = |r: f64| {
            if r.is_finite() {
                format!("{r:.2}")
            } else {
                "—".to_string()
            }
        };
        let ratios: Vec<String> = self.round_ratios().into_iter().map(ratio).collect();
        ratios.join(" / ")
    }

    /// Whether the goal is met: in every round (see the module's doc).
    pub fn met(&self) -> String {
        if let Target::None = self.target {
            return "—".to_string();
        }
        if self.rounds.is_empty() {
            return self.met_on_ratio().to_string();
        }
        let ratios = self.round_ratios();
        if !ratios.iter().any(|r| r.is_finite()) {
            return "no (no figure)".to_string();
        }
        let levels: Vec<Level> = ratios.iter().map(|&r| self.target.level(r)).collect();
        let n = levels.len();
        let k = levels.iter().filter(|&&l| l != Level::No).count();
        if levels.iter().all(|&l| l == Level::Stretch) {
            "yes (stretch too)".to_string()
        } else if k == n {
            "yes".to_string()
        } else if k > 0 {
            format!("no ({k} of {n} rounds)")
        } else {
            "no".to_string()
        }
    }

    /// A row without rounds (and with a target): its main ratio judged, as
    /// the text says.
    fn met_on_ratio(&self) -> &'static str {
        let ratio = self.ratio();
        if !ratio.is_finite() {
            return "no (no figure)";
        }
        match self.target.level(ratio) {
            Level::Stretch => "yes (stretch too; ratio only, no rounds)",
            Level::Yes => "yes (ratio only, no rounds)",
            Level::No => "no (ratio only, no rounds)",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Goal, Target};

    /// A goal of `target` with these rounds, its main figures their
    /// medians (as the throughput and handoff rows' are).
    // The benchmark's target compiles this module with `--cfg test` but no
    // test harness, which drops the tests and leaves this unused.
    #[allow(dead_code)]
    fn goal(target: Target, rounds: &[(f64, f64)]) -> Goal {
        let median = |f: fn(&(f64, f64)) -> f64| {
            let mut v: Vec<f64> = rounds.iter().map(f).filter(|v| !v.is_nan()).collect();
            v.sort_by(f64::total_cmp);
            match v.len() {
                0 => f64::NAN,
                n if n % 2 == 1 => v[n / 2],
                n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
            }
        };
        Goal {
            measure: "test".to_string(),
            latchkey: median(|r| r.0),
            reference: median(|r| r.1),
            decimals: 0,
            target,
            rounds: rounds.to_vec(),
        }
    }

    #[test]
    fn median_meets_but_one_round_does_not() {
        // Ratios 1.00, 1.10, 0.80: the medians' ratio 1.00 meets ≥ 0.9.
        let g = goal(
            Target::AtLeast(0.9, None),
            &[(100.0, 100.0), (110.0, 100.0), (80.0, 100.0)],
        );
        assert!(g.ratio() >= 0.9);
        assert_eq!(g.met(), "no (2 of 3 rounds)");
        assert_eq!(g.rounds_column(), "1.00 / 1.10 / 0.80");
    }

    #[test]
    fn every_round_meeting_is_yes() {
        let g = goal(
            Target::AtLeast(0.85, None),
            &[(84.0, 100.0), (89.0, 100.0), (91.0, 100.0), (85.0, 100.0)],
        );
        assert_eq!(g.met(), "no (3 of 4 rounds)");
        let g = goal(
            Target::AtLeast(0.85, None),
            &[(86.0, 100.0), (89.0, 100.0), (91.0, 100.0)],
        );
        assert_eq!(g.met(), "yes");
    }

    #[test]
    fn no_round_meeting_is_no() {
        let g = goal(
            Target::AtLeast(0.2, Some(0.3)),
            &[(12.0, 100.0), (15.0, 100.0)],
        );
        assert_eq!(g.met(), "no");
    }

    #[test]
    fn stretch_only_when_every_round_meets_it() {
        let target = Target::AtLeast(0.2, Some(0.3));
        let g = goal(target, &[(31.0, 100.0), (35.0, 100.0), (30.0, 100.0)]);
        assert_eq!(g.met(), "yes (stretch too)");
        let g = goal(target, &[(31.0, 100.0), (25.0, 100.0), (35.0, 100.0)]);
        assert_eq!(g.met(), "yes");
        let g = goal(target, &[(31.0, 100.0), (15.0, 100.0), (35.0, 100.0)]);
        assert_eq!(g.met(), "no (2 of 3 rounds)");
    }

    #[test]
    fn at_most_goals_judge_every_round() {
        let target = Target::AtMost(1.5);
        let g = goal(target, &[(0.30, 0.20), (0.25, 0.20), (0.28, 0.20)]);
        assert_eq!(g.met(), "yes");
        // Ratios 1.50, 1.60, 1.25: the medians' ratio 1.40 meets ≤ 1.5.
        let g = goal(target, &[(0.30, 0.20), (0.32, 0.20), (0.25, 0.20)]);
        assert!(g.ratio() <= 1.5);
        assert_eq!(g.met(), "no (2 of 3 rounds)");
        let g = goal(target, &[(0.40, 0.20), (0.32, 0.20)]);
        assert_eq!(g.met(), "no");
    }

    #[test]
    fn nan_rounds_count_as_not_met() {
        let g = goal(
            Target::AtLeast(0.8, None),
            &[(90.0, 100.0), (f64::NAN, 100.0), (95.0, 100.0)],
        );
        // The medians leave the NaN out: their ratio meets the goal.
        assert!(g.ratio() >= 0.8);
        assert_eq!(g.met(), "no (2 of 3 rounds)");
        assert_eq!(g.rounds_column(), "0.90 / — / 0.95");
        let g = goal(Target::AtMost(2.0), &[(1.0, 1.0), (1.0, f64::NAN)]);
        assert_eq!(g.met(), "no (1 of 2 rounds)");
        let g = goal(Target::AtMost(2.0), &[(f64::NAN, 1.0), (1.0, f64::NAN)]);
        assert_eq!(g.met(), "no (no figure)");
    }

    #[test]
    fn no_rounds_falls_back_to_the_ratio() {
        let mut g = goal(Target::AtLeast(0.9, None), &[]);
        (g.latchkey, g.reference) = (95.0, 100.0);
        assert_eq!(g.met(), "yes (ratio only, no rounds)");
        assert_eq!(g.rounds_column(), "—");
        g.latchkey = 85.0;
        assert_eq!(g.met(), "no (ratio only, no rounds)");
        g.target = Target::AtLeast(0.2, Some(0.3));
        assert_eq!(g.met(), "yes (stretch too; ratio only, no rounds)");
        g.target = Target::AtMost(2.0);
        g.latchkey = f64::NAN;
        assert_eq!(g.met(), "no (no figure)");
    }

    #[test]
    fn no_target_is_not_judged() {
        let g = goal(Target::None, &[(1.0, 2.0), (3.0, 2.0)]);
        assert_eq!(g.met(), "—");
        assert_eq!(g.rounds_column(), "0.50 / 1.50");
        assert_eq!(goal(Target::None, &[]).met(), "—");
    }
}
