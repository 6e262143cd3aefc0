//! Medians, percentiles, and how a figure is printed.

use std::time::Duration;

/// Median of some figures (NaN when there are none). Rounds that could not
/// produce a figure give NaN and are left out.
pub fn median(mut values: Vec<f64>) -> f64 {
    values.retain(|v| !v.is_nan());
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

/// Nearest-rank percentile of sorted durations (None when empty).
pub fn percentile(sorted: &[Duration], p: f64) -> Option<Duration> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// Percentile in microseconds (NaN when empty); sorts `samples`.
pub fn percentile_us(samples: &mut [Duration], p: f64) -> f64 {
    samples.sort_unstable();
    percentile(samples, p).map_or(f64::NAN, |d| d.as_secs_f64() * 1e6)
}

/// A figure with `decimals` digits, "—" when there is none.
pub fn fig(value: f64, decimals: usize) -> String {
    if value.is_finite() {
        format!("{value:.decimals$}")
    } else {
        "—".to_string()
    }
}
