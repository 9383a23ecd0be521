//! A per-subscription rate limit as a token bucket: capacity `max(1, ceil(rate))`
//! (a burst of at most one second's worth), refilled continuously at `rate` per
//! second. Guarantee: in any window of length `w`, at most `capacity + rate × w`
//! starts are allowed — exactly, with no floating-point drift.
//!
//! The bucket is kept in its GCRA form: one "theoretical arrival time" (TAT) in
//! integer nanoseconds instead of a fractional token count. Each start pushes the
//! TAT one emission interval (`1/rate`, rounded *up* to a nanosecond, so never
//! faster than the rate) past `max(TAT, now)`; a start is allowed while
//! `now ≥ TAT − (capacity − 1) × interval`. Time is an argument and may stand
//! still or go backwards (the bucket then simply refills nothing).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A valid rate: positive and finite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// Nanoseconds per token, ≥ 1.
    interval_ns: u128,
    capacity: u64,
}

/// A rate that cannot limit anything: zero, negative, infinite or NaN.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
#[error("{rate} is not a positive, finite number")]
pub struct InvalidRate {
    /// The rate given.
    pub rate: f64,
}

impl RateLimit {
    /// `None` (unlimited) for a rate that is not positive and finite.
    pub fn per_second(rate: f64) -> Option<Self> {
        Self::try_per_second(rate).ok()
    }

    /// The limit of `rate` per second, or why `rate` is not one: the check every flag and
    /// field holding a rate is validated with.
    pub fn try_per_second(rate: f64) -> Result<Self, InvalidRate> {
        if !(rate.is_finite() && rate > 0.0) {
            return Err(InvalidRate { rate });
        }
        // `as` saturates: a tiny rate gets an interval of centuries, not a wrap.
        let interval_ns = ((1e9 / rate).ceil() as u128).max(1);
        let capacity = (rate.ceil() as u64).max(1);
        Ok(Self {
            interval_ns,
            capacity,
        })
    }

    /// The same rate without a burst: a bucket of one, so starts are evenly spaced at
    /// least [`interval`](Self::interval) apart from the first.
    pub fn paced(self) -> Self {
        Self {
            capacity: 1,
            ..self
        }
    }

    /// Starts allowed at once from a full bucket.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Time to refill one token.
    pub fn interval(&self) -> Duration {
        duration_from_nanos(self.interval_ns)
    }

    /// How far the TAT may run ahead of `now` and still allow a start.
    fn tolerance_ns(&self) -> u128 {
        u128::from(self.capacity - 1).saturating_mul(self.interval_ns)
    }
}

/// One subscription's bucket; starts full.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenBucket {
    limit: RateLimit,
    /// Theoretical arrival time, ns since the epoch; ≤ now means full.
    tat_ns: u128,
}

impl TokenBucket {
    pub fn new(limit: RateLimit) -> Self {
        Self { limit, tat_ns: 0 }
    }

    pub fn limit(&self) -> RateLimit {
        self.limit
    }

    /// Changes the rate, keeping what has been spent (no fresh burst).
    pub fn set_limit(&mut self, limit: RateLimit) {
        self.limit = limit;
    }

    /// Whether a start is allowed at `now` (a token is available).
    pub fn allows(&self, now: SystemTime) -> bool {
        nanos(now).saturating_add(self.limit.tolerance_ns()) >= self.tat_ns
    }

    /// Takes a token at `now`; `false` (and no change) when the bucket is empty.
    pub fn try_take(&mut self, now: SystemTime) -> bool {
        if !self.allows(now) {
            return false;
        }
        self.tat_ns = self
            .tat_ns
            .max(nanos(now))
            .saturating_add(self.limit.interval_ns);
        true
    }

    /// The earliest time a start is allowed (in the past when one is allowed now).
    pub fn next_start(&self) -> SystemTime {
        time_from_nanos(self.tat_ns.saturating_sub(self.limit.tolerance_ns()))
    }

    /// Full at `now`: forgetting the bucket would change nothing.
    pub fn is_full(&self, now: SystemTime) -> bool {
        self.tat_ns <= nanos(now)
    }
}

fn nanos(t: SystemTime) -> u128 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos())
}

fn duration_from_nanos(ns: u128) -> Duration {
    Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
}

fn time_from_nanos(ns: u128) -> SystemTime {
    let d = duration_from_nanos(ns);
    UNIX_EPOCH
        .checked_add(d)
        .unwrap_or(UNIX_EPOCH + Duration::from_secs(u64::from(u32::MAX)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(ms)
    }

    #[test]
    fn invalid_rates_are_unlimited() {
        for rate in [0.0, -1.0, -0.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert_eq!(RateLimit::per_second(rate), None, "{rate}");
        }
    }

    #[test]
    fn invalid_rates_are_refused_with_the_rate() {
        for rate in [0.0, -1.0, f64::INFINITY] {
            let e = RateLimit::try_per_second(rate).unwrap_err();
            assert_eq!(e, InvalidRate { rate });
            assert!(e.to_string().contains("positive, finite"), "{e}");
        }
        assert!(RateLimit::try_per_second(f64::NAN).is_err());
        assert!(RateLimit::try_per_second(0.001).is_ok());
    }

    #[test]
    fn a_paced_limit_spaces_every_start_an_interval_apart() {
        let mut b = TokenBucket::new(RateLimit::per_second(4.0).unwrap().paced());
        assert_eq!(b.limit().capacity(), 1);
        assert!(b.try_take(at(1_000)), "the first start is at once");
        assert!(!b.try_take(at(1_000)), "no burst");
        assert_eq!(b.next_start(), at(1_250));
        assert!(!b.allows(at(1_249)));
        assert!(b.try_take(at(1_250)));
        // After an idle spell the next start is at once, and only one.
        assert!(b.try_take(at(9_000)));
        assert!(!b.try_take(at(9_000)));
        assert_eq!(b.next_start(), at(9_250));
    }

    #[test]
    fn capacity_and_interval_table() {
        // (rate, capacity, interval in ns)
        let table: &[(f64, u64, u64)] = &[
            (5.0, 5, 200_000_000),
            (1.0, 1, 1_000_000_000),
            (0.5, 1, 2_000_000_000),
            (2.5, 3, 400_000_000),
            (3.0, 3, 333_333_334), // rounded up: never faster than the rate
            (1e12, 1_000_000_000_000, 1),
        ];
        for &(rate, capacity, interval) in table {
            let l = RateLimit::per_second(rate).unwrap();
            assert_eq!(l.capacity(), capacity, "{rate}");
            assert_eq!(l.interval(), Duration::from_nanos(interval), "{rate}");
        }
        let tiny = RateLimit::per_second(1e-300).unwrap();
        assert_eq!(tiny.capacity(), 1);
        assert_eq!(tiny.interval(), Duration::from_nanos(u64::MAX));
    }

    #[test]
    fn full_bucket_bursts_capacity_then_refills_at_the_rate() {
        let mut b = TokenBucket::new(RateLimit::per_second(5.0).unwrap());
        let t0 = at(10_000);
        assert!(b.is_full(t0));
        for _ in 0..5 {
            assert!(b.try_take(t0));
        }
        assert!(!b.try_take(t0), "burst is capacity");
        assert_eq!(b.next_start(), at(10_200));
        assert!(!b.allows(at(10_199)));
        assert!(b.try_take(at(10_200)));
        assert!(!b.try_take(at(10_200)));
        assert_eq!(b.next_start(), at(10_400));
        // A long idle refills to capacity, never beyond.
        let later = at(60_000);
        assert!(b.is_full(later));
        let taken = (0..10).filter(|_| b.try_take(later)).count();
        assert_eq!(taken, 5);
    }

    #[test]
    fn time_going_backwards_refills_nothing() {
        let mut b = TokenBucket::new(RateLimit::per_second(1.0).unwrap());
        assert!(b.try_take(at(5_000)));
        assert!(!b.try_take(at(1_000)));
        assert!(!b.try_take(at(5_999)));
        assert!(b.try_take(at(6_000)));
    }

    #[test]
    fn lowering_the_rate_keeps_what_was_spent() {
        let mut b = TokenBucket::new(RateLimit::per_second(10.0).unwrap());
        for _ in 0..10 {
            assert!(b.try_take(at(0)));
        }
        b.set_limit(RateLimit::per_second(1.0).unwrap());
        assert!(!b.allows(at(0)));
        assert_eq!(b.limit().capacity(), 1);
    }
}
