//! What a run measured and what it is held against: the [`Report`],
//! what a later phase adds to it ([`Section`], [`Line`]), and the goals'
//! rows ([`Goal`]).

use crate::{alongside, fanout, handoff, parked, throughput};

/// Everything measured.
pub struct Report {
    /// One line each, printed above the table.
    pub notes: Vec<String>,
    pub throughput: Vec<throughput::Row>,
    pub handoff: Vec<handoff::Row>,
    pub fanout: fanout::Row,
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
/// others), goals, footnotes. Its errors go to [`Report::errors`].
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
    pub latchkey: f64,
    pub reference: f64,
    /// Digits of the two figures.
    pub decimals: usize,
    pub target: Target,
}
