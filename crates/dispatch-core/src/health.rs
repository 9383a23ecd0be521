//! The circuit breakers the dispatcher replicas share, as records: a breaker's
//! [`Shared`] state goes to `subscriptions.health` as an [`EndpointHealth`]
//! (keyed by subscription) when it changes here, and every replica adopts what
//! it reads there (`Machine::adopt_breaker`). See
//! docs/design.md#circuit-breaker.

use std::time::Duration;

use hookline_core::{epoch, Opened, Shared};
use hookline_envelope::EndpointHealth;

/// The record of `subscription_id`'s breaker state, written by `written_by`.
pub fn record(subscription_id: &str, shared: &Shared, written_by: &str) -> EndpointHealth {
    let open = shared.open.as_ref();
    EndpointHealth {
        subscription_id: subscription_id.to_owned(),
        open_since: open.map(|o| epoch::millis(o.since)),
        open_until: open.map(|o| epoch::millis(o.until)),
        open_period_ms: open.map_or(0, |o| {
            i64::try_from(o.period.as_millis()).unwrap_or(i64::MAX)
        }),
        changed_at: epoch::millis(shared.changed_at),
        written_by: written_by.to_owned(),
    }
}

/// The state a record holds. Open needs both times; a record with only one
/// of them (not written by hookline) is read as open until the one it has.
pub fn shared(record: &EndpointHealth) -> Shared {
    let open = match (record.open_since, record.open_until) {
        (None, None) => None,
        (since, until) => {
            let (since, until) = (
                since.or(until).unwrap_or_default(),
                until.or(since).unwrap_or_default(),
            );
            Some(Opened {
                since: epoch::from_millis(since),
                until: epoch::from_millis(until),
                period: Duration::from_millis(u64::try_from(record.open_period_ms).unwrap_or(0)),
            })
        }
    };
    Shared {
        open,
        changed_at: epoch::from_millis(record.changed_at),
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    use super::*;

    fn t(ms: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(1_700_000_000_000 + ms)
    }

    #[test]
    fn a_state_survives_its_record() {
        for shared in [
            Shared {
                open: Some(Opened {
                    since: t(0),
                    until: t(60_000),
                    period: Duration::from_secs(60),
                }),
                changed_at: t(30_000),
            },
            Shared {
                open: None,
                changed_at: t(90_000),
            },
        ] {
            let r = record("sub-1", &shared, "hookline-dispatcher-0");
            assert_eq!(r.subscription_id, "sub-1");
            assert_eq!(r.written_by, "hookline-dispatcher-0");
            let back = hookline_envelope::decode::<EndpointHealth>(&hookline_envelope::encode(&r))
                .unwrap();
            assert_eq!(super::shared(&back), shared);
        }
    }

    #[test]
    fn a_record_with_one_time_is_open_until_it() {
        let r = EndpointHealth {
            subscription_id: "s".into(),
            open_since: None,
            open_until: Some(1_700_000_060_000),
            open_period_ms: 0,
            changed_at: 1_700_000_000_000,
            written_by: String::new(),
        };
        let open = shared(&r).open.unwrap();
        assert_eq!((open.since, open.until), (t(60_000), t(60_000)));
    }
}
