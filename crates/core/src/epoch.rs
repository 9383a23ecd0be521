//! Epoch time: the one conversion between `SystemTime` and the `i64` milliseconds (or
//! microseconds) since the Unix epoch that every record timestamp uses.
//!
//! Pure, like the rest of this crate: the caller passes the time, usually
//! `SystemTime::now()`, so nothing here reads a clock. Saturating both ways, never
//! panicking: a time before the epoch is 0, one beyond `i64::MAX` units is `i64::MAX`, and a
//! negative timestamp is the epoch itself.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the epoch of `t`.
pub fn millis(t: SystemTime) -> i64 {
    since_epoch(t).map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Microseconds since the epoch of `t`.
pub fn micros(t: SystemTime) -> i64 {
    since_epoch(t).map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// The time `ms` milliseconds after the epoch; the epoch for a negative `ms`.
pub fn from_millis(ms: i64) -> SystemTime {
    let after = Duration::from_millis(ms.max(0).unsigned_abs());
    // Every i64 of milliseconds fits a `SystemTime` on the platforms hookline runs on;
    // the fallback only keeps this total.
    UNIX_EPOCH.checked_add(after).unwrap_or(UNIX_EPOCH)
}

fn since_epoch(t: SystemTime) -> Option<Duration> {
    t.duration_since(UNIX_EPOCH).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn millis_and_micros_count_from_the_epoch() {
        let t = UNIX_EPOCH + Duration::from_micros(1_700_000_000_123_456);
        assert_eq!(millis(t), 1_700_000_000_123);
        assert_eq!(micros(t), 1_700_000_000_123_456);
        assert_eq!(millis(UNIX_EPOCH), 0);
    }

    #[test]
    fn a_time_before_the_epoch_is_zero() {
        let before = UNIX_EPOCH - Duration::from_secs(1);
        assert_eq!(millis(before), 0);
        assert_eq!(micros(before), 0);
    }

    #[test]
    fn a_time_beyond_i64_saturates() {
        // i64::MAX microseconds is about 292,000 years; SystemTime reaches further.
        let Some(far) = UNIX_EPOCH.checked_add(Duration::from_secs(u64::from(u32::MAX) << 12))
        else {
            return; // a platform whose SystemTime cannot hold it has nothing to saturate
        };
        assert_eq!(micros(far), i64::MAX);
        assert!(millis(far) < i64::MAX);
    }

    #[test]
    fn from_millis_round_trips_and_clamps_negatives_to_the_epoch() {
        for ms in [0, 1, 1_700_000_000_123, i64::MAX / 1000] {
            assert_eq!(millis(from_millis(ms)), ms, "{ms}");
        }
        assert_eq!(from_millis(-5), UNIX_EPOCH);
        assert_eq!(from_millis(i64::MIN), UNIX_EPOCH);
    }
}
