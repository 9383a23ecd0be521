//! Percentiles of samples (nearest rank on the sorted samples).

use serde::Serialize;

/// A distribution summary in milliseconds.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Summary {
    pub n: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
}

impl Summary {
    pub fn of(mut ms: Vec<f64>) -> Self {
        ms.sort_by(|a, b| a.total_cmp(b));
        Self {
            n: ms.len(),
            p50_ms: pct(&ms, 0.50),
            p99_ms: pct(&ms, 0.99),
            p999_ms: pct(&ms, 0.999),
            max_ms: ms.last().copied().unwrap_or(f64::NAN),
        }
    }
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Milliseconds with a precision that suits the magnitude.
pub fn ms(v: f64) -> String {
    if v.is_nan() {
        "n/a".to_owned()
    } else if v < 10.0 {
        format!("{v:.2} ms")
    } else if v < 1000.0 {
        format!("{v:.0} ms")
    } else {
        format!("{:.2} s", v / 1000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let s = Summary::of((1..=1000).map(f64::from).rev().collect());
        assert_eq!(
            (s.p50_ms, s.p99_ms, s.p999_ms, s.max_ms),
            (500.0, 990.0, 999.0, 1000.0)
        );
        assert!(Summary::of(Vec::new()).p50_ms.is_nan());
    }
}
