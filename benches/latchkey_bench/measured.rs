//! What a run measured and what it is held against: the [`Report`],
//! what a later phase adds to it ([`Section`], [`Line`]), and the goals'
//! rows ([`Goal`], from [`crate::verdict`]): each a latchkey figure and its
//! reference (medians over rounds, or pooled over them), and the pair of
//! every round, on which the goal is judged: met only when it holds in
//! every round.

pub use crate::verdict::{Goal, Target};
use crate::{alongside, fanout, handoff, parked, throughput};

/// Everything measured.
pub struct Report {
    /// One line each, printed above the table.
    pub notes: Vec<String>,
    pub throughput: Vec<throughput::Row>,
    pub handoff: Vec<handoff::Row>,
    /// None when the phase did not run (`LATCHKEY_BENCH_PHASES`).
    pub fanout: Option<fanout::Row>,
    pub parked: Vec<parked::Row>,
    /// Kinds measured next to plain locks.
    pub alongside: Vec<alongside::Row>,
    /// What later phases add (rows, goals, footnotes).
    pub sections: Vec<Section>,
    /// Labels of the CPU figures of the throughput rows.
    pub cpu_labels: Vec<String>,
    pub errors: Vec<String>,
}

/// What one phase adds to the report: rows of the main table (after the
/// others), goals (with the pairs of their rounds where the phase measures
/// in rounds), footnotes. Its errors go to [`Report::errors`].
#[derive(Debug, Default)]
pub struct Section {
    pub rows: Vec<Line>,
    pub goals: Vec<Goal>,
    pub notes: Vec<String>,
}

/// A row of the main table.
#[derive(Debug, Clone)]
pub struct Line {
    pub measure: String,
    pub latchkey: f64,
    /// The direct column (NaN: none).
    pub direct: f64,
    /// The bare column (NaN: none).
    pub bare: f64,
    pub decimals: usize,
}
