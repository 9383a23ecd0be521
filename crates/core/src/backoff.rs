//! How long to wait before trying an infrastructure call again (a transaction,
//! an archive write, a partition's hand-off): the wait starts at `initial`,
//! grows by `factor` after each failure up to `max`, and starts over after a
//! success. Each wait is shortened by a random share of up to `jitter` of it,
//! so replicas that failed together do not retry in step; a wait never exceeds
//! its un-jittered value, so `max` bounds every wait.
//!
//! Pure: the caller draws the jitter (a number in `[0, 1)`) and sleeps;
//! `hookline_runtime::retry` does both on tokio's clock.

use std::time::Duration;

/// A back-off: the wait after the next failure, and how it grows.
///
/// ```
/// # use std::time::Duration;
/// # use hookline_core::Backoff;
/// let mut b = Backoff::new(Duration::from_millis(500), Duration::from_secs(30));
/// assert_eq!(b.next(0.0), Duration::from_millis(500));
/// assert_eq!(b.next(0.0), Duration::from_secs(1));
/// b.reset();
/// assert_eq!(b.current(), Duration::from_millis(500));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    factor: u32,
    jitter: f64,
    current: Duration,
    failures: u32,
}

impl Backoff {
    /// Doubling from `initial` up to `max` (`initial` if `max` is shorter),
    /// without jitter.
    pub const fn new(initial: Duration, max: Duration) -> Self {
        let max = if max.as_nanos() < initial.as_nanos() {
            initial
        } else {
            max
        };
        Self {
            initial,
            max,
            factor: 2,
            jitter: 0.0,
            current: initial,
            failures: 0,
        }
    }

    /// The same wait after every failure.
    pub const fn constant(wait: Duration) -> Self {
        Self::new(wait, wait).with_factor(1)
    }

    /// Grows by `factor` (at least 1: 1 keeps the wait constant) instead of
    /// doubling.
    pub const fn with_factor(mut self, factor: u32) -> Self {
        self.factor = if factor == 0 { 1 } else { factor };
        self
    }

    /// Shortens each wait by up to `fraction` of it (clamped to `[0, 1]`; 0.5:
    /// a wait of 1 s becomes 0.5–1 s), as the caller's draw says.
    pub const fn with_jitter(mut self, fraction: f64) -> Self {
        self.jitter = if fraction.is_nan() || fraction < 0.0 {
            0.0
        } else if fraction > 1.0 {
            1.0
        } else {
            fraction
        };
        self
    }

    /// The un-jittered wait after the next failure.
    pub const fn current(&self) -> Duration {
        self.current
    }

    /// Failures since the start or the last [`reset`](Self::reset).
    pub const fn failures(&self) -> u32 {
        self.failures
    }

    /// The first wait, and the wait after a success.
    pub const fn initial(&self) -> Duration {
        self.initial
    }

    /// The longest wait.
    pub const fn max(&self) -> Duration {
        self.max
    }

    /// The most of a wait jitter takes off, as a fraction in `[0, 1]`.
    pub const fn jitter(&self) -> f64 {
        self.jitter
    }

    /// A failure: the wait before the next try, [`current`](Self::current)
    /// shortened by `draw` (in `[0, 1)`, uniform; out of range is clamped)
    /// times the jitter fraction. The wait after the next failure grows.
    pub fn next(&mut self, draw: f64) -> Duration {
        let wait = self.jittered(draw);
        self.failures = self.failures.saturating_add(1);
        self.current = self
            .current
            .checked_mul(self.factor)
            .map_or(self.max, |grown| grown.min(self.max));
        wait
    }

    /// [`current`](Self::current) with jitter applied, without counting a
    /// failure or growing the wait: what [`next`](Self::next) would return.
    pub fn jittered(&self, draw: f64) -> Duration {
        let draw = if draw.is_nan() {
            0.0
        } else {
            draw.clamp(0.0, 1.0)
        };
        let cut = self.jitter * draw;
        if cut == 0.0 {
            return self.current;
        }
        // Never past the nominal wait, even by a float's rounding; one too
        // long for a float to hold back is kept whole.
        Duration::try_from_secs_f64(self.current.as_secs_f64() * (1.0 - cut))
            .map_or(self.current, |wait| wait.min(self.current))
    }

    /// A success: the next failure waits `initial` again.
    pub fn reset(&mut self) {
        self.current = self.initial;
        self.failures = 0;
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn waits_grow_by_the_factor_up_to_max() {
        // (back-off, draws, expected waits)
        let cases: Vec<(Backoff, Vec<f64>, Vec<u64>)> = vec![
            (
                Backoff::new(ms(500), ms(30_000)),
                vec![0.0; 8],
                vec![500, 1_000, 2_000, 4_000, 8_000, 16_000, 30_000, 30_000],
            ),
            (
                Backoff::new(ms(200), ms(10_000)),
                vec![0.0; 7],
                vec![200, 400, 800, 1_600, 3_200, 6_400, 10_000],
            ),
            (
                Backoff::new(ms(100), ms(1_000)).with_factor(3),
                vec![0.0; 4],
                vec![100, 300, 900, 1_000],
            ),
            (
                Backoff::constant(ms(500)),
                vec![0.0; 3],
                vec![500, 500, 500],
            ),
            // A factor of 0 would stop every wait: it is taken as 1.
            (
                Backoff::new(ms(100), ms(1_000)).with_factor(0),
                vec![0.0; 3],
                vec![100, 100, 100],
            ),
            // A max below initial is initial.
            (Backoff::new(ms(800), ms(100)), vec![0.0; 2], vec![800, 800]),
            (
                Backoff::new(Duration::ZERO, ms(100)),
                vec![0.0; 2],
                vec![0, 0],
            ),
        ];
        for (mut b, draws, want) in cases {
            let got: Vec<u64> = draws
                .iter()
                .map(|d| b.next(*d).as_millis() as u64)
                .collect();
            assert_eq!(got, want, "{b:?}");
            assert_eq!(b.failures() as usize, want.len());
        }
    }

    #[test]
    fn jitter_shortens_a_wait_by_the_drawn_share_of_the_fraction() {
        // (fraction, draw, wait of a nominal 1000 ms)
        let cases = [
            (0.5, 0.0, 1_000),
            (0.5, 0.5, 750),
            (0.5, 0.9, 550),
            (0.2, 0.5, 900),
            (1.0, 0.25, 750),
            (0.0, 0.9, 1_000),
            // Out-of-range fractions and draws are clamped; NaN is none.
            (2.0, 0.5, 500),
            (-1.0, 0.5, 1_000),
            (f64::NAN, 0.5, 1_000),
            (0.5, 7.0, 500),
            (0.5, -3.0, 1_000),
            (0.5, f64::NAN, 1_000),
        ];
        for (fraction, draw, want) in cases {
            let mut b = Backoff::constant(ms(1_000)).with_jitter(fraction);
            assert_eq!(b.jittered(draw), ms(want), "{fraction} {draw}");
            assert_eq!(b.next(draw), ms(want), "{fraction} {draw}");
        }
    }

    #[test]
    fn jitter_does_not_change_how_the_wait_grows() {
        let mut b = Backoff::new(ms(500), ms(4_000)).with_jitter(0.5);
        let nominal: Vec<Duration> = [0.9, 0.1, 0.7, 0.3, 0.5]
            .into_iter()
            .map(|d| {
                let before = b.current();
                b.next(d);
                before
            })
            .collect();
        assert_eq!(
            nominal,
            [ms(500), ms(1_000), ms(2_000), ms(4_000), ms(4_000)]
        );
    }

    #[test]
    fn a_success_starts_over() {
        let mut b = Backoff::new(ms(500), ms(30_000)).with_jitter(0.5);
        b.next(0.3);
        b.next(0.3);
        assert_eq!((b.current(), b.failures()), (ms(2_000), 2));
        b.reset();
        assert_eq!((b.current(), b.failures()), (ms(500), 0));
        assert_eq!(b.next(0.0), ms(500));
        assert_eq!(
            (b.initial(), b.max(), b.jitter()),
            (ms(500), ms(30_000), 0.5)
        );
    }

    #[test]
    fn a_huge_factor_saturates_at_max() {
        let mut b =
            Backoff::new(Duration::from_secs(u64::MAX / 2), Duration::MAX).with_factor(u32::MAX);
        b.next(0.0);
        assert_eq!(b.current(), Duration::MAX);
        b.next(0.0);
        assert_eq!(b.current(), Duration::MAX);
    }

    proptest! {
        #[test]
        fn every_wait_is_within_jitter_of_its_nominal_and_never_past_max(
            initial in 0u64..10_000,
            max in 0u64..100_000,
            factor in 0u32..5,
            fraction in 0.0f64..=1.0,
            draws in proptest::collection::vec(0.0f64..1.0, 1..30),
        ) {
            let mut b = Backoff::new(ms(initial), ms(max))
                .with_factor(factor)
                .with_jitter(fraction);
            let mut last = Duration::ZERO;
            for draw in draws {
                let nominal = b.current();
                prop_assert!(nominal >= last, "the nominal wait never shrinks");
                last = nominal;
                let wait = b.next(draw);
                prop_assert!(wait <= nominal);
                prop_assert!(wait <= b.max());
                prop_assert!(wait.as_secs_f64() >= nominal.as_secs_f64() * (1.0 - fraction) - 1e-9);
            }
        }
    }
}
