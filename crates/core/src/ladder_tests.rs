use proptest::prelude::*;

use super::*;

const T0: u64 = 1_700_000_000;

fn at(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// 10 s, 60 s, 900 s, 7200 s; no jitter; effectively unbounded attempts and age.
fn plain() -> Ladder {
    let tiers = Ladder::default().tiers().to_vec();
    Ladder::new(tiers, 1000, MAX_LADDER_DURATION, Duration::ZERO).unwrap()
}

fn retry(tier: usize, due: u64) -> RetryDecision {
    RetryDecision::Retry {
        tier,
        due_at: at(due),
    }
}

#[test]
fn default_ladder_shape() {
    let l = Ladder::default();
    let names: Vec<_> = l.tiers().iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["retry-10s", "retry-1m", "retry-15m", "retry-2h"]);
    let delays: Vec<_> = l.tiers().iter().map(|t| t.delay.as_secs()).collect();
    assert_eq!(delays, [10, 60, 900, 7200]);
    assert_eq!(l.max_attempts(), 15);
    assert_eq!(l.max_age(), secs(24 * 3600));
    assert_eq!(l.max_jitter(), Duration::from_millis(500));
    assert_eq!(l.tier_index("retry-15m"), Some(2));
    assert_eq!(l.tier_index("retry-3h"), None);
}

#[test]
fn decide_table() {
    let l = plain();
    let now = T0 + 100;
    // (attempts_made, retry_after secs, expected)
    let cases: &[(u32, Option<u64>, RetryDecision)] = &[
        (0, None, retry(0, now + 10)),
        (1, None, retry(0, now + 10)),
        (2, None, retry(1, now + 60)),
        (3, None, retry(2, now + 900)),
        (4, None, retry(3, now + 7200)),
        (5, None, retry(3, now + 7200)),
        (999, None, retry(3, now + 7200)),
        // A hint is waited exactly, on the longest tier that fits in it.
        (1, Some(0), retry(0, now + 10)),
        (1, Some(10), retry(0, now + 10)),
        (1, Some(11), retry(0, now + 11)),
        (1, Some(61), retry(1, now + 61)),
        (1, Some(120), retry(1, now + 120)),
        (1, Some(3600), retry(2, now + 3600)),
        // The ladder step is a floor under a shorter hint.
        (2, Some(5), retry(1, now + 60)),
        (4, Some(61), retry(3, now + 7200)),
        // Longer than the last tier: the last tier, due at the hint (re-parked).
        (1, Some(86_400), retry(3, now + 86_400)),
        (4, Some(86_400), retry(3, now + 86_400)),
        // Capped at max_retry_after (24 h by default).
        (1, Some(3 * 86_400), retry(3, now + 86_400)),
    ];
    for (attempts, hint, expected) in cases {
        let got = l.decide(*attempts, at(T0), at(now), hint.map(secs), false, 0.0);
        assert_eq!(got, *expected, "attempts {attempts}, hint {hint:?}");
    }
}

#[test]
fn a_throttle_waits_its_hint_and_does_not_climb_the_ladder() {
    let l = plain();
    let now = T0 + 100;
    // (attempts_made, retry_after secs, expected)
    let cases: &[(u32, Option<u64>, RetryDecision)] = &[
        (1, Some(1), retry(0, now + 10)),
        (5, Some(1), retry(0, now + 10)),
        (5, None, retry(0, now + 10)),
        (9, Some(12), retry(0, now + 12)),
        (9, Some(61), retry(1, now + 61)),
        (9, Some(90_000), retry(3, now + 86_400)),
    ];
    for (attempts, hint, expected) in cases {
        let got = l.decide(*attempts, at(T0), at(now), hint.map(secs), true, 0.0);
        assert_eq!(got, *expected, "attempts {attempts}, hint {hint:?}");
    }
}

#[test]
fn max_retry_after_caps_the_hint_and_zero_ignores_it() {
    let capped = plain().with_max_retry_after(secs(3600)).unwrap();
    assert_eq!(capped.max_retry_after(), secs(3600));
    let now = T0 + 100;
    assert_eq!(
        capped.decide(1, at(T0), at(now), Some(secs(86_400)), false, 0.0),
        retry(2, now + 3600)
    );
    let ignoring = plain().with_max_retry_after(Duration::ZERO).unwrap();
    assert_eq!(
        ignoring.decide(1, at(T0), at(now), Some(secs(86_400)), false, 0.0),
        retry(0, now + 10)
    );
    assert_eq!(
        plain()
            .with_max_retry_after(MAX_LADDER_DURATION + secs(1))
            .err(),
        Some(LadderError::TooLong {
            what: LadderSetting::MaxRetryAfter,
            value: MAX_LADDER_DURATION + secs(1),
        })
    );
}

#[test]
fn release_table() {
    let l = plain();
    let w = T0; // written to the tier at T0
    let release = |tier: usize, due: u64, written: Option<u64>, now: u64| {
        l.release(tier, at(due), written.map(at), at(now))
    };
    let wait = |until: u64| Release::Wait { until: at(until) };
    // (tier, due, written, now, expected)
    let cases: &[(usize, u64, Option<u64>, u64, Release)] = &[
        // Due: ready, whatever the tier says.
        (0, w + 10, Some(w), w + 10, Release::Ready),
        (3, w + 10, Some(w), w + 11, Release::Ready),
        // Before the tier releases it: wait for that, or for the due time if sooner.
        (0, w + 10, Some(w), w, wait(w + 10)),
        (3, w + 86_400, Some(w), w + 100, wait(w + 7200)),
        (1, w + 30, Some(w), w + 5, wait(w + 30)),
        // Released, not due, at most the first tier's delay left: wait in place.
        (3, w + 7205, Some(w), w + 7200, wait(w + 7205)),
        (1, w + 70, Some(w), w + 60, wait(w + 70)),
        // Released with more left: re-parked on the longest tier that fits.
        (1, w + 71, Some(w), w + 60, Release::Repark { tier: 0 }),
        (
            3,
            w + 86_400,
            Some(w),
            w + 7200,
            Release::Repark { tier: 3 },
        ),
        (3, w + 8200, Some(w), w + 7200, Release::Repark { tier: 2 }),
        (
            3,
            w + 7200 + 120,
            Some(w),
            w + 7200,
            Release::Repark { tier: 1 },
        ),
        // No write time (no timestamp): wait for the due time, as a tier always did.
        (3, w + 86_400, None, w + 7200, wait(w + 86_400)),
    ];
    for (tier, due, written, now, expected) in cases {
        assert_eq!(
            release(*tier, *due, *written, *now),
            *expected,
            "tier {tier}, due {due}, written {written:?}, now {now}"
        );
    }
}

#[test]
fn exhaustion_table() {
    let tiers = vec![Tier::new("a", secs(10)), Tier::new("b", secs(100))];
    let l = Ladder::new(tiers, 5, secs(1000), secs(4)).unwrap();
    let exhausted = |reason| RetryDecision::Exhausted { reason };
    // (attempts_made, now offset from T0, hint, jitter_unit, expected)
    let cases: &[(u32, u64, Option<u64>, f64, RetryDecision)] = &[
        (4, 0, None, 0.0, retry(1, T0 + 100)),
        (5, 0, None, 0.0, exhausted(ExhaustReason::MaxAttempts)),
        (6, 0, None, 0.0, exhausted(ExhaustReason::MaxAttempts)),
        // Attempt count wins over age when both are exceeded.
        (5, 5000, None, 0.0, exhausted(ExhaustReason::MaxAttempts)),
        // Due exactly at the deadline is allowed; one second later is not.
        (1, 990, None, 0.0, retry(0, T0 + 1000)),
        (1, 991, None, 0.0, exhausted(ExhaustReason::MaxAge)),
        // Jitter counts: 988 + 10 + 2 = 1000 fits, 988 + 10 + 4 does not.
        (1, 988, None, 0.5, retry(0, T0 + 1000)),
        (1, 988, None, 1.0, exhausted(ExhaustReason::MaxAge)),
        // A hint is waited exactly: up to the deadline it is retried, past it exhausted.
        (1, 950, Some(50), 0.0, retry(0, T0 + 1000)),
        (1, 950, Some(51), 0.0, exhausted(ExhaustReason::MaxAge)),
    ];
    for (attempts, offset, hint, unit, expected) in cases {
        let got = l.decide(
            *attempts,
            at(T0),
            at(T0 + offset),
            hint.map(secs),
            false,
            *unit,
        );
        assert_eq!(
            got, *expected,
            "attempts {attempts}, offset {offset}, hint {hint:?}, jitter {unit}"
        );
    }
}

#[test]
fn jitter_is_clamped_to_unit_interval() {
    let tiers = vec![Tier::new("a", secs(10))];
    let l = Ladder::new(tiers, 10, secs(3600), secs(4)).unwrap();
    let cases: &[(f64, u64)] = &[
        (0.0, 10_000),
        (0.25, 11_000),
        (0.999, 13_996),
        (1.0, 14_000),
        (7.0, 14_000),
        (f64::INFINITY, 14_000),
        (-0.5, 10_000),
        (f64::NEG_INFINITY, 10_000),
        (f64::NAN, 10_000),
    ];
    for (unit, millis) in cases {
        let got = l.decide(1, at(T0), at(T0), None, false, *unit);
        let due = at(T0) + Duration::from_millis(*millis);
        assert_eq!(
            got,
            RetryDecision::Retry {
                tier: 0,
                due_at: due
            },
            "unit {unit}"
        );
    }
}

#[test]
fn default_ladder_gives_about_a_day_of_attempts() {
    let l = Ladder::default();
    let mut now = at(T0);
    let mut attempts = 1;
    let mut times = vec![0];
    let reason = loop {
        match l.decide(attempts, at(T0), now, None, false, 0.0) {
            RetryDecision::Retry { due_at, .. } => {
                now = due_at;
                attempts += 1;
                times.push(now.duration_since(at(T0)).unwrap().as_secs());
            }
            RetryDecision::Exhausted { reason } => break reason,
        }
    };
    assert_eq!(attempts, 15);
    assert_eq!(reason, ExhaustReason::MaxAttempts);
    assert_eq!(&times[..5], &[0, 10, 70, 970, 8170]);
    assert_eq!(*times.last().unwrap(), 970 + 11 * 7200); // 22 h 16 m 10 s
                                                         // Had max_attempts allowed one more, max_age would have stopped it.
    let unlimited = Ladder::new(l.tiers().to_vec(), 100, l.max_age(), Duration::ZERO).unwrap();
    assert_eq!(
        unlimited.decide(15, at(T0), now, None, false, 0.0),
        RetryDecision::Exhausted {
            reason: ExhaustReason::MaxAge
        }
    );
}

#[test]
fn validation_table() {
    let t = |name: &str, s: u64| Tier::new(name, secs(s));
    let day = secs(86_400);
    let too_long = MAX_LADDER_DURATION + secs(1);
    // (tiers, max_attempts, max_age, max_jitter, expected error)
    type Case = (Vec<Tier>, u32, Duration, Duration, Option<LadderError>);
    let cases: Vec<Case> = vec![
        (vec![t("a", 1)], 1, secs(1), Duration::ZERO, None),
        (
            vec![t("r.10s_x-1", 1), t("b", 2)],
            3,
            day,
            MAX_LADDER_DURATION,
            None,
        ),
        (vec![], 3, day, secs(1), Some(LadderError::NoTiers)),
        (
            vec![t("", 1)],
            3,
            day,
            secs(1),
            Some(LadderError::InvalidTierName { name: "".into() }),
        ),
        (
            vec![t("a/b", 1)],
            3,
            day,
            secs(1),
            Some(LadderError::InvalidTierName { name: "a/b".into() }),
        ),
        (
            vec![t(&"x".repeat(201), 1)],
            3,
            day,
            secs(1),
            Some(LadderError::InvalidTierName {
                name: "x".repeat(201),
            }),
        ),
        (
            vec![t("a", 1), t("a", 2)],
            3,
            day,
            secs(1),
            Some(LadderError::DuplicateTierName { name: "a".into() }),
        ),
        (
            vec![t("a", 0)],
            3,
            day,
            secs(1),
            Some(LadderError::ZeroDelay { name: "a".into() }),
        ),
        (
            vec![t("a", 10), t("b", 10)],
            3,
            day,
            secs(1),
            Some(LadderError::NotIncreasing {
                name: "b".into(),
                delay: secs(10),
                previous: secs(10),
            }),
        ),
        (
            vec![t("a", 10), t("b", 5)],
            3,
            day,
            secs(1),
            Some(LadderError::NotIncreasing {
                name: "b".into(),
                delay: secs(5),
                previous: secs(10),
            }),
        ),
        (
            vec![t("a", 1)],
            0,
            day,
            secs(1),
            Some(LadderError::ZeroMaxAttempts),
        ),
        (
            vec![t("a", 1)],
            3,
            Duration::ZERO,
            secs(1),
            Some(LadderError::ZeroMaxAge),
        ),
        (
            vec![Tier::new("a", too_long)],
            3,
            day,
            secs(1),
            Some(LadderError::TooLong {
                what: LadderSetting::TierDelay,
                value: too_long,
            }),
        ),
        (
            vec![t("a", 1)],
            3,
            too_long,
            secs(1),
            Some(LadderError::TooLong {
                what: LadderSetting::MaxAge,
                value: too_long,
            }),
        ),
        (
            vec![t("a", 1)],
            3,
            day,
            too_long,
            Some(LadderError::TooLong {
                what: LadderSetting::MaxJitter,
                value: too_long,
            }),
        ),
    ];
    for (tiers, attempts, age, jitter, expected) in cases {
        let got = Ladder::new(tiers.clone(), attempts, age, jitter).err();
        assert_eq!(got, expected, "tiers {tiers:?}");
    }
}

fn ladder_strategy() -> impl Strategy<Value = Ladder> {
    (
        prop::collection::btree_set(1u64..100_000, 1..6),
        1u32..40,
        1u64..1_000_000,
        0u64..10_000,
    )
        .prop_map(|(delays, attempts, age, jitter)| {
            let tiers = delays
                .into_iter()
                .enumerate()
                .map(|(i, d)| Tier::new(format!("t{i}"), Duration::from_millis(d)))
                .collect();
            Ladder::new(
                tiers,
                attempts,
                Duration::from_millis(age),
                Duration::from_millis(jitter),
            )
            .unwrap()
        })
}

proptest! {
    /// Never before the hint (up to `max_retry_after`), never before the ladder step
    /// unless it is a throttle, never past `max_age`; the tier is the longest that fits.
    #[test]
    fn retry_is_never_early_and_the_tier_fits_the_wait(
        l in ladder_strategy(),
        attempts in 0u32..60,
        hint_ms in proptest::option::of(0u64..200_000_000),
        throttled in any::<bool>(),
        age_used_ms in 0u64..1_000_000,
        unit in 0.0f64..1.0,
    ) {
        let now = at(T0) + Duration::from_millis(age_used_ms);
        let hint = hint_ms.map(Duration::from_millis);
        let tiers = l.tiers();
        let last = tiers.len() - 1;
        let step = (attempts.max(1) as usize - 1).min(last);
        let floor = if throttled { tiers[0].delay } else { tiers[step].delay };
        let need = hint.unwrap_or_default().min(l.max_retry_after()).max(floor);
        // Oracle: the last tier whose delay is within the wait, else the first.
        let oracle = (0..=last).rev().find(|&i| tiers[i].delay <= need).unwrap_or(0);
        let deadline = at(T0) + l.max_age();
        let earliest = now + need;
        let latest = earliest + l.max_jitter();
        let decision = l.decide(attempts, at(T0), now, hint, throttled, unit);
        match decision {
            RetryDecision::Retry { tier, due_at } => {
                prop_assert!(attempts < l.max_attempts());
                prop_assert_eq!(tier, oracle);
                if !throttled {
                    prop_assert!(tier >= step, "a failure never goes below its step");
                    prop_assert!(due_at >= now + tiers[step].delay);
                }
                prop_assert!(due_at >= now + hint.unwrap_or_default().min(l.max_retry_after()));
                prop_assert!(due_at >= earliest && due_at <= latest);
                prop_assert!(due_at <= deadline);
            }
            RetryDecision::Exhausted { reason: ExhaustReason::MaxAttempts } => {
                prop_assert!(attempts >= l.max_attempts());
            }
            RetryDecision::Exhausted { reason: ExhaustReason::MaxAge } => {
                prop_assert!(attempts < l.max_attempts());
                prop_assert!(latest > deadline);
            }
        }
        // Whenever even the earliest possible due misses the deadline, it is exhausted;
        // whenever even the latest fits, it is retried.
        if attempts < l.max_attempts() && earliest > deadline {
            prop_assert_eq!(decision, RetryDecision::Exhausted { reason: ExhaustReason::MaxAge });
        }
        if attempts < l.max_attempts() && latest <= deadline {
            let is_retry = matches!(decision, RetryDecision::Retry { .. });
            prop_assert!(is_retry);
        }
    }

    /// A record parked through the tiers (re-parked each time its tier releases it
    /// before it is due) is attempted exactly at its due time, never before, and no
    /// tier holds it longer than its own delay plus the first tier's.
    #[test]
    fn parking_through_the_tiers_releases_exactly_at_the_due_time(
        l in ladder_strategy(),
        tops in 0.0f64..1000.0,
        lag_ms in 0u64..2_000,
    ) {
        // Up to a thousand times the last tier's delay.
        let top = l.tiers().last().unwrap().delay;
        let wait_ms = (top.as_millis() as f64 * tops) as u64;
        let due = at(T0) + Duration::from_millis(wait_ms);
        let mut tier = l.park_tier(Duration::from_millis(wait_ms));
        let mut written = at(T0);
        let mut now = written;
        let mut parks = 0;
        loop {
            match l.release(tier, due, Some(written), now) {
                Release::Ready => break,
                Release::Wait { until } => {
                    prop_assert!(until > now);
                    prop_assert!(until <= due);
                    let held = until.duration_since(written).unwrap();
                    prop_assert!(held <= l.tiers()[tier].delay + l.tiers()[0].delay);
                    now = until;
                }
                Release::Repark { tier: next } => {
                    prop_assert!(now < due);
                    prop_assert!(l.tiers()[next].delay <= due.duration_since(now).unwrap());
                    // Written again a little later (the transaction's lag).
                    written = now + Duration::from_millis(lag_ms);
                    now = written;
                    tier = next;
                    parks += 1;
                    prop_assert!(parks < 10_000, "never ends");
                }
            }
        }
        prop_assert!(now >= due, "attempted before its due time");
        // Late only by the lag of the last write, never more.
        prop_assert!(now <= due + Duration::from_millis(lag_ms));
    }

    #[test]
    fn tier_is_monotone_in_attempts(
        l in ladder_strategy(),
        hint_ms in proptest::option::of(0u64..200_000),
        unit in 0.0f64..1.0,
    ) {
        let l = Ladder::new(l.tiers().to_vec(), u32::MAX, MAX_LADDER_DURATION, l.max_jitter()).unwrap();
        let hint = hint_ms.map(Duration::from_millis);
        let mut previous = 0;
        for attempts in 1..(l.tiers().len() as u32 + 3) {
            match l.decide(attempts, at(T0), at(T0), hint, false, unit) {
                RetryDecision::Retry { tier, .. } => {
                    prop_assert!(tier >= previous, "attempt {attempts}: tier {tier} < {previous}");
                    previous = tier;
                }
                other => prop_assert!(false, "unexpected {other:?}"),
            }
        }
    }
}

#[test]
fn topic_chars_are_ascii_alphanumerics_dot_underscore_and_dash() {
    let cases = [
        ("retry-10s", None),
        ("a.b_c-D9", None),
        ("", None),
        ("a/b", Some('/')),
        ("tier 1", Some(' ')),
        ("é", Some('é')),
        ("ok,bad", Some(',')),
    ];
    for (name, want) in cases {
        assert_eq!(illegal_topic_char(name), want, "{name:?}");
    }
}

#[test]
fn the_default_ladder_is_the_default_tiers() {
    let l = Ladder::default();
    let tiers: Vec<(&str, Duration)> = l
        .tiers()
        .iter()
        .map(|t| (t.name.as_str(), t.delay))
        .collect();
    assert_eq!(tiers, DEFAULT_TIERS);
}

#[test]
fn a_too_long_setting_is_named_by_value_and_in_the_message() {
    let err = Ladder::new(
        vec![Tier::new("a", secs(1))],
        3,
        MAX_LADDER_DURATION * 2,
        secs(1),
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            LadderError::TooLong {
                what: LadderSetting::MaxAge,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().starts_with("max_age of "), "{err}");
}
