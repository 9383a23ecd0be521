use proptest::prelude::*;

use super::*;
use crate::classify::{classify, AttemptResult};

const S: BreakerSettings = BreakerSettings::DEFAULT;

fn at(ms: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000) + Duration::from_millis(ms)
}

fn fail(b: &mut Breaker, now: SystemTime) -> Option<Transition> {
    b.record(&S, now, Signal::Failure, false)
}

#[test]
fn opens_after_a_run_of_failures_and_a_success_resets_the_run() {
    let mut b = Breaker::default();
    for i in 0..9 {
        assert_eq!(fail(&mut b, at(i)), None);
    }
    assert_eq!(b.record(&S, at(9), Signal::Success, false), None);
    for i in 0..9 {
        assert_eq!(
            fail(&mut b, at(10 + i)),
            None,
            "failure {i} after the success"
        );
    }
    assert!(!b.is_open());
    assert_eq!(fail(&mut b, at(20)), Some(Transition::Opened));
    assert!(b.is_open());
    assert_eq!(
        b.admit(&S, at(21)),
        Admit::Park {
            until: at(20) + S.open_for
        }
    );
}

#[test]
fn opens_on_the_failure_ratio_over_the_window_without_a_run() {
    let mut b = Breaker::default();
    // Alternating: never two failures in a row. The 20th attempt (10 failures) opens.
    for i in 0..19u64 {
        let signal = if i % 2 == 0 {
            Signal::Failure
        } else {
            Signal::Success
        };
        assert_eq!(
            b.record(&S, at(i * 100), signal, false),
            None,
            "attempt {i}"
        );
    }
    assert_eq!(
        b.record(&S, at(1_900), Signal::Success, false),
        None,
        "a success never opens"
    );
    assert_eq!(fail(&mut b, at(2_000)), Some(Transition::Opened));
}

#[test]
fn failures_older_than_the_window_do_not_count() {
    let mut b = Breaker::default();
    for i in 0..19u64 {
        let signal = if i % 2 == 0 {
            Signal::Failure
        } else {
            Signal::Success
        };
        b.record(&S, at(i), signal, false);
    }
    // Two windows later: only this attempt is in the window.
    assert_eq!(fail(&mut b, at(120_000)), None);
    assert!(!b.is_open());
}

/// Opens `b` at `at(9)`; returns what it shares.
fn opened(b: &mut Breaker) -> Shared {
    for i in 0..10 {
        fail(b, at(i));
    }
    b.shared()
}

#[test]
fn a_restarted_replica_adopts_an_open_breaker_and_parks_until_the_probe() {
    let mut before = Breaker::default();
    let shared = opened(&mut before);
    assert_eq!(
        shared,
        Shared {
            open: Some(Opened {
                since: at(9),
                until: at(9) + S.open_for,
                period: S.open_for
            }),
            changed_at: at(9)
        }
    );
    let mut after = Breaker::default();
    assert!(after.adopt(&S, shared));
    assert!(
        !after.adopt(&S, shared),
        "adopting it again changes nothing"
    );
    assert_eq!(
        after.admit(&S, at(100)),
        Admit::Park {
            until: at(9) + S.open_for
        }
    );
    assert_eq!(after.admit(&S, at(9) + S.open_for), Admit::Probe);
}

#[test]
fn the_disable_clock_counts_from_the_first_opening_any_replica_saw() {
    let mut a = Breaker::default();
    opened(&mut a);
    // Another replica opened later on its own, and failed a probe since.
    let later = Shared {
        open: Some(Opened {
            since: at(5_000),
            until: at(70_000),
            period: 2 * S.open_for,
        }),
        changed_at: at(10_000),
    };
    assert!(a.adopt(&S, later));
    assert_eq!(
        a.shared().open.map(|o| (o.since, o.until)),
        Some((at(9), at(70_000))),
        "its own earlier opening, the later state's probe time"
    );
    let after = S.disable_after.unwrap();
    assert!(a.disable_due(&S, at(9) + after));
}

#[test]
fn the_later_change_wins_and_on_a_tie_the_open_one() {
    let mut b = Breaker::default();
    let open = opened(&mut b);
    let closed_before = Shared {
        open: None,
        changed_at: at(8),
    };
    assert!(!b.adopt(&S, closed_before), "an older closing loses");
    assert!(b.is_open());
    let closed_tie = Shared {
        open: None,
        changed_at: open.changed_at,
    };
    assert!(!b.adopt(&S, closed_tie), "on a tie the open one wins");
    let closed_after = Shared {
        open: None,
        changed_at: at(20),
    };
    assert!(b.adopt(&S, closed_after));
    assert!(!b.is_open());
    assert_eq!(b.admit(&S, at(21)), Admit::Attempt);
    assert!(
        !b.adopt(&S, open),
        "the older opening, arriving late, loses"
    );
    let mut fresh = Breaker::default();
    assert!(fresh.adopt(&S, open));
    let tie = Shared {
        open: None,
        changed_at: open.changed_at,
    };
    assert!(!fresh.adopt(&S, tie), "an adopted opening wins its tie too");
}

#[test]
fn neutral_results_never_count() {
    let mut b = Breaker::default();
    for i in 0..100 {
        assert_eq!(b.record(&S, at(i), Signal::Neutral, false), None);
    }
    assert!(b.is_idle());
}

#[test]
fn open_parks_then_one_probe_then_closes_on_success() {
    let mut b = Breaker::default();
    for i in 0..10 {
        fail(&mut b, at(i));
    }
    let opened = at(9);
    let until = opened + S.open_for;
    assert_eq!(
        b.admit(&S, until - Duration::from_millis(1)),
        Admit::Park { until }
    );
    assert_eq!(b.admit(&S, until), Admit::Probe);
    // One probe at a time: the rest waits for its answer, written nowhere.
    assert_eq!(
        b.admit(&S, until),
        Admit::Wait {
            until: until + S.open_for
        }
    );
    // An attempt started before it opened ends: says nothing new.
    assert_eq!(
        b.record(&S, until, Signal::Success, false),
        None,
        "only the probe closes it"
    );
    assert_eq!(
        b.record(&S, until, Signal::Success, true),
        Some(Transition::Closed)
    );
    assert!(!b.is_open());
    assert_eq!(
        b.shared(),
        Shared {
            open: None,
            changed_at: until
        }
    );
    assert!(!b.is_idle(), "a closing is remembered against older states");
    assert_eq!(b.admit(&S, until), Admit::Attempt);
}

#[test]
fn a_failed_probe_reopens_for_twice_as_long_up_to_the_cap() {
    let mut b = Breaker::default();
    for i in 0..10 {
        fail(&mut b, at(i));
    }
    let mut now = at(9) + S.open_for;
    let mut expected = S.open_for;
    for _ in 0..8 {
        assert_eq!(b.admit(&S, now), Admit::Probe);
        expected = (expected * 2).min(S.open_max);
        assert_eq!(
            b.record(&S, now, Signal::Failure, true),
            Some(Transition::Reopened { for_: expected })
        );
        assert_eq!(
            b.admit(&S, now),
            Admit::Park {
                until: now + expected
            }
        );
        now += expected;
    }
    assert_eq!(expected, S.open_max);
}

#[test]
fn a_neutral_probe_lets_the_next_delivery_probe() {
    let mut b = Breaker::default();
    for i in 0..10 {
        fail(&mut b, at(i));
    }
    let now = at(9) + S.open_for;
    assert_eq!(b.admit(&S, now), Admit::Probe);
    assert_eq!(b.record(&S, now, Signal::Neutral, true), None);
    assert_eq!(b.admit(&S, now), Admit::Probe);
}

#[test]
fn disable_is_due_after_disable_after_open_across_reopens() {
    let mut b = Breaker::default();
    for i in 0..10 {
        fail(&mut b, at(i));
    }
    let opened = at(9);
    let after = S.disable_after.unwrap();
    let mut now = opened + S.open_for;
    while now < opened + after {
        assert!(!b.disable_due(&S, now));
        assert_eq!(b.admit(&S, now), Admit::Probe);
        b.record(&S, now, Signal::Failure, true);
        now += S.open_max;
    }
    assert!(b.disable_due(&S, opened + after));
    let never = BreakerSettings {
        disable_after: None,
        ..S
    };
    assert!(!b.disable_due(&never, opened + after * 10));
    assert!(!Breaker::default().disable_due(&S, opened + after));
}

#[test]
fn off_never_opens() {
    let off = BreakerSettings::OFF;
    assert!(!off.enabled());
    let mut b = Breaker::default();
    for i in 0..1_000 {
        assert_eq!(b.record(&off, at(i), Signal::Failure, false), None);
        assert_eq!(b.admit(&off, at(i)), Admit::Attempt);
    }
}

#[test]
fn settings_are_validated() {
    assert_eq!(S.validate(), Ok(()));
    assert_eq!(BreakerSettings::OFF.validate(), Ok(()));
    let bad = |f: fn(&mut BreakerSettings)| {
        let mut s = S;
        f(&mut s);
        s.validate()
    };
    assert_eq!(
        bad(|s| s.failure_ratio = 1.5),
        Err(BreakerError::Ratio(1.5))
    );
    assert_eq!(
        bad(|s| s.window = Duration::ZERO),
        Err(BreakerError::Window)
    );
    assert_eq!(bad(|s| s.min_attempts = 0), Err(BreakerError::Window));
    assert!(matches!(
        bad(|s| s.open_for = Duration::ZERO),
        Err(BreakerError::OpenFor { .. })
    ));
    assert!(matches!(
        bad(|s| s.open_max = Duration::from_secs(1)),
        Err(BreakerError::OpenFor { .. })
    ));
}

#[test]
fn signal_table() {
    let now = SystemTime::UNIX_EPOCH;
    let response = |status: u16, hint: Option<&str>| AttemptResult::Response {
        status,
        retry_after: hint.map(str::to_owned),
    };
    let cases: &[(AttemptResult, Signal)] = &[
        (response(200, None), Signal::Success),
        (response(204, None), Signal::Success),
        (response(500, None), Signal::Failure),
        (response(503, None), Signal::Failure),
        (response(408, None), Signal::Failure),
        (response(503, Some("5")), Signal::Neutral),
        (response(429, None), Signal::Neutral),
        (response(429, Some("5")), Signal::Neutral),
        (response(400, None), Signal::Neutral),
        (response(410, None), Signal::Neutral),
        (response(301, None), Signal::Neutral),
        (AttemptResult::Failed(FailureKind::Timeout), Signal::Failure),
        (
            AttemptResult::Failed(FailureKind::ConnectRefused),
            Signal::Failure,
        ),
        (AttemptResult::Failed(FailureKind::Tls), Signal::Failure),
        (
            AttemptResult::Failed(FailureKind::MissingSecret),
            Signal::Neutral,
        ),
        (
            AttemptResult::Failed(FailureKind::EgressDenied),
            Signal::Neutral,
        ),
        (
            AttemptResult::Failed(FailureKind::PayloadTooLarge),
            Signal::Neutral,
        ),
        (
            AttemptResult::Failed(FailureKind::InvalidUrl),
            Signal::Neutral,
        ),
    ];
    for (result, expected) in cases {
        assert_eq!(Signal::of(&classify(result, now)), *expected, "{result:?}");
    }
}

#[derive(Debug, Clone)]
enum Op {
    /// Time passes (ms), then a due delivery asks to be sent.
    Admit(u32),
    /// An attempt in flight ends with this signal (0 success, 1 failure, 2 neutral).
    End(u32, u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u32..40_000).prop_map(Op::Admit),
        (0u32..40_000, 0u8..3).prop_map(|(t, s)| Op::End(t, s)),
    ]
}

proptest! {
    /// Driven by random admissions and attempt results: nothing is sent while it
    /// is open, at most one probe is out at a time, a delivery waits only while
    /// a probe is out, a parked delivery is parked until a time after now, and
    /// only a probe's success closes it.
    #[test]
    fn never_sends_while_open_and_probes_one_at_a_time(ops in prop::collection::vec(op(), 1..300)) {
        let mut b = Breaker::default();
        let mut now = at(0);
        // In flight: whether each is the probe.
        let mut in_flight: Vec<bool> = Vec::new();
        for op in ops {
            match op {
                Op::Admit(dt) => {
                    now += Duration::from_millis(u64::from(dt));
                    let open_before = b.is_open();
                    match b.admit(&S, now) {
                        Admit::Attempt => {
                            prop_assert!(!open_before, "an attempt while open");
                            in_flight.push(false);
                        }
                        Admit::Probe => {
                            prop_assert!(open_before);
                            prop_assert!(!in_flight.contains(&true), "two probes out");
                            in_flight.push(true);
                        }
                        Admit::Park { until } => {
                            prop_assert!(b.is_open());
                            prop_assert!(until > now);
                        }
                        Admit::Wait { until } => {
                            prop_assert!(b.is_open());
                            prop_assert!(in_flight.contains(&true), "waits with no probe out");
                            prop_assert!(until > now);
                        }
                    }
                }
                Op::End(dt, s) => {
                    let Some(probe) = in_flight.pop() else { continue };
                    now += Duration::from_millis(u64::from(dt));
                    let signal = [Signal::Success, Signal::Failure, Signal::Neutral][usize::from(s)];
                    let was_open = b.is_open();
                    let t = b.record(&S, now, signal, probe);
                    if t == Some(Transition::Closed) {
                        prop_assert!(probe && signal == Signal::Success);
                    }
                    if was_open && !probe {
                        prop_assert_eq!(t, None);
                        prop_assert!(b.is_open());
                    }
                }
            }
        }
    }
}
