//! Fuzzing of attempt classification and the retry ladder, run by `cargo test`: arbitrary
//! status codes, arbitrary `Retry-After` values (digits of any length, signs, fractions,
//! HTTP-dates in all three forms from 1970 to 9999, broken dates, whitespace, random
//! Unicode), every `FailureKind`, and arbitrary clocks — including ones at the ends of
//! representable time.
//!
//! Checked: nothing panics; the outcome is one of `OUTCOMES`; the verdict follows the rules
//! of docs/design.md#classification by status class (re-derived here, not copied from the code); the parsed hint
//! equals the RFC 9110 value when the header is well formed, is absent when it is not, and
//! never exceeds `MAX_RETRY_AFTER`; a retry verdict fed to the ladder is never scheduled
//! before its ladder step nor before the hint (up to `max_retry_after`), picks the longest
//! tier that fits its wait, never overruns `max_age`, and time arithmetic never overflows.
//!
//! `HOOKLINE_FUZZ_CASES` sets the number of cases, `HOOKLINE_FUZZ_SEED` replays a run. The
//! summary goes to stderr (`-- --nocapture` shows it when the test passes).

use std::{
    cell::RefCell,
    collections::BTreeMap,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use hookline_core::{
    classify, parse_retry_after, AttemptResult, ExhaustReason, FailureKind, Ladder, RejectReason,
    RetryDecision, Tier, Verdict, MAX_LADDER_DURATION, MAX_RETRY_AFTER, OUTCOMES,
};
use proptest::{
    collection::vec,
    prelude::*,
    sample::select,
    test_runner::{Config, RngSeed, TestCaseError, TestRunner},
};

/// About 4 s in a debug build on a shared 2-core machine; raise it for a longer hunt.
const DEFAULT_CASES: u32 = 50_000;

/// The last second `httpdate` can represent: 9999-12-31T23:59:59Z.
const LAST_HTTP_DATE: u64 = 253_402_300_799;

const FAILURE_KINDS: [FailureKind; 11] = [
    FailureKind::Timeout,
    FailureKind::ConnectTimeout,
    FailureKind::ConnectRefused,
    FailureKind::ConnectionReset,
    FailureKind::Dns,
    FailureKind::Tls,
    FailureKind::Protocol,
    FailureKind::EgressDenied,
    FailureKind::PayloadTooLarge,
    FailureKind::MissingSecret,
    FailureKind::InvalidUrl,
];

use hookline_fuzzing::{cases as fuzz_cases, seed as fuzz_seed};

// ---------------------------------------------------------------------------------------
// Inputs.

/// A `Retry-After` value and what RFC 9110 §10.2.3 says it means, when that is certain.
#[derive(Debug, Clone)]
enum Hint {
    /// Delta-seconds, possibly far beyond u64, possibly with leading zeros and OWS.
    Seconds(String),
    /// An HTTP-date for this second since the epoch, in one of the three forms.
    Date { text: String, at: u64 },
    /// Not a valid value: signed or fractional numbers, empty or blank.
    Invalid(String),
    /// A date with one character changed, or arbitrary text: no expectation but the bound.
    Garbage(String),
}

impl Hint {
    fn text(&self) -> &str {
        match self {
            Self::Seconds(t) | Self::Invalid(t) | Self::Garbage(t) => t,
            Self::Date { text, .. } => text,
        }
    }

    fn category(&self) -> &'static str {
        match self {
            Self::Seconds(_) => "delta-seconds",
            Self::Date { .. } => "http-date",
            Self::Invalid(_) => "invalid",
            Self::Garbage(_) => "garbage",
        }
    }
}

fn ows() -> impl Strategy<Value = String> {
    prop_oneof![4 => Just(String::new()), 1 => "[ \t]{1,3}"]
}

fn seconds() -> impl Strategy<Value = Hint> {
    let digits = prop_oneof![
        "[0-9]{1,7}",
        "[0-9]{19,21}",
        "0{1,30}[0-9]{1,6}",
        "[0-9]{22,60}",
        select(vec![
            "604799",
            "604800",
            "604801",
            "18446744073709551615",
            "18446744073709551616",
        ])
        .prop_map(str::to_owned),
    ];
    (ows(), digits, ows()).prop_map(|(a, d, b)| Hint::Seconds(format!("{a}{d}{b}")))
}

fn invalid() -> impl Strategy<Value = Hint> {
    prop_oneof![
        "-[0-9]{1,25}",
        "\\+[0-9]{1,5}",
        "[0-9]{1,6}\\.[0-9]{1,3}",
        "[0-9]{1,3}[eE][0-9]{1,3}",
        "0x[0-9a-f]{1,4}",
        "[0-9]{1,3} [0-9]{1,3}",
        "[0-9]{1,4}s",
        "[ \t]{0,4}",
    ]
    .prop_map(Hint::Invalid)
}

/// IMF-fixdate, RFC 850 (two-digit years mean 1970-2069) or asctime, from `httpdate`'s
/// IMF-fixdate of the same instant.
fn date_text(at: u64, form: u8) -> String {
    let imf = httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(at));
    // "Sun, 06 Nov 1994 08:49:37 GMT"
    let (wday, day, mon, year, time) = (
        &imf[..3],
        &imf[5..7],
        &imf[8..11],
        &imf[12..16],
        &imf[17..25],
    );
    let year_n: u32 = year.parse().expect("four digits");
    match form {
        1 if (1970..2070).contains(&year_n) => {
            let long = match wday {
                "Mon" => "Monday",
                "Tue" => "Tuesday",
                "Wed" => "Wednesday",
                "Thu" => "Thursday",
                "Fri" => "Friday",
                "Sat" => "Saturday",
                _ => "Sunday",
            };
            format!("{long}, {day}-{mon}-{} {time} GMT", &year[2..])
        }
        2 => {
            let day = day
                .strip_prefix('0')
                .map_or(day.to_owned(), |d| format!(" {d}"));
            format!("{wday} {mon} {day} {time} {year}")
        }
        _ => imf,
    }
}

/// A date near `now` (either side), at the ends of the representable range, or anywhere.
fn date(now: SystemTime) -> impl Strategy<Value = Hint> {
    let now_secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let near = (-800_000i64..800_000)
        .prop_map(move |off| now_secs.saturating_add_signed(off).min(LAST_HTTP_DATE));
    let at = prop_oneof![
        4 => near,
        1 => 0u64..=86_400,
        1 => (LAST_HTTP_DATE - 86_400)..=LAST_HTTP_DATE,
        2 => 0u64..=LAST_HTTP_DATE,
    ];
    (at, 0u8..3, ows(), ows()).prop_map(|(at, form, a, b)| Hint::Date {
        text: format!("{a}{}{b}", date_text(at, form)),
        at,
    })
}

fn garbage(now: SystemTime) -> impl Strategy<Value = Hint> {
    let broken_date =
        (date(now), any::<prop::sample::Index>(), any::<char>()).prop_map(|(hint, at, c)| {
            let mut chars: Vec<char> = hint.text().chars().collect();
            let i = at.index(chars.len());
            chars[i] = c;
            chars.into_iter().collect::<String>()
        });
    prop_oneof![
        2 => broken_date,
        1 => "\\PC{0,40}",
        1 => any::<String>(),
        1 => "[\\x20-\\x7e]{0,40}",
        1 => select(vec![
            "Wed, 21 Oct 2015 25:00:00 GMT",
            "Thu, 31 Feb 2015 07:28:00 GMT",
            "Thu, 21 Oct 2015 07:28:00 GMT",
            "Wed, 21 Oct 1969 07:28:00 GMT",
            "Fri, 01 Jan 10000 00:00:00 GMT",
            "Wed, 21 Oct 2015 07:28:00 UTC",
            "wed, 21 oct 2015 07:28:00 gmt",
            "Wed, 21 Oct 2015 07:28:60 GMT",
            "\u{a0}120",
            "１２０",
        ])
        .prop_map(str::to_owned),
    ]
    .prop_map(Hint::Garbage)
}

/// A clock anywhere in `SystemTime`'s range, mostly in this era.
fn clock() -> impl Strategy<Value = SystemTime> {
    let secs = prop_oneof![
        6 => 0i64..4_102_444_800,
        1 => (i64::MAX - 1_000_000_000)..=i64::MAX,
        1 => i64::MIN..0,
        1 => any::<i64>(),
    ];
    (secs, 0u32..1_000_000_000).prop_map(|(secs, nanos)| {
        let d = Duration::new(secs.unsigned_abs(), nanos);
        let t = if secs >= 0 {
            UNIX_EPOCH.checked_add(d)
        } else {
            UNIX_EPOCH.checked_sub(d)
        };
        t.unwrap_or(UNIX_EPOCH)
    })
}

fn status() -> impl Strategy<Value = u16> {
    prop_oneof![
        2 => any::<u16>(),
        3 => 100u16..=599,
        2 => select(vec![
            0, 1, 99, 100, 101, 199, 200, 204, 299, 300, 304, 399, 400, 404, 407, 408, 409, 418,
            424, 425, 426, 428, 429, 430, 499, 500, 503, 599, 600, 999, 1000, 65535,
        ]),
    ]
}

fn ladder() -> impl Strategy<Value = Ladder> {
    let max = MAX_LADDER_DURATION.as_millis() as u64;
    let delay = prop_oneof![1u64..120_000, 1u64..=max];
    let custom = (
        vec(delay, 1..6),
        1u32..40,
        prop_oneof![1 => 1u64..3_600_000, 3 => 86_400_000u64..=max],
        prop_oneof![Just(0u64), 0u64..5_000, 0u64..=max],
    )
        .prop_map(|(mut delays, max_attempts, age, jitter)| {
            delays.sort_unstable();
            delays.dedup();
            let tiers = delays
                .iter()
                .enumerate()
                .map(|(i, ms)| Tier::new(format!("t{i}"), Duration::from_millis(*ms)))
                .collect();
            Ladder::new(
                tiers,
                max_attempts,
                Duration::from_millis(age),
                Duration::from_millis(jitter),
            )
            .expect("a valid ladder")
        });
    prop_oneof![1 => Just(Ladder::default()), 2 => custom]
}

#[derive(Debug, Clone)]
enum Attempt {
    Response { status: u16, hint: Option<Hint> },
    Failed(FailureKind),
}

#[derive(Debug, Clone)]
struct Case {
    now: SystemTime,
    result: Attempt,
    ladder: Ladder,
    attempts_made: u32,
    first_attempt_at: SystemTime,
    jitter_unit: f64,
}

fn case() -> BoxedStrategy<Case> {
    let jitter = prop_oneof![
        4 => 0.0f64..=1.0,
        1 => select(vec![0.0, 1.0, -1.0, 2.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.0]),
        1 => any::<f64>(),
    ];
    let ago = prop_oneof![3 => 0u64..3600, 1 => 0u64..(100 * 24 * 3600)];
    (clock(), ladder(), jitter, ago, 0u8..5)
        .prop_flat_map(|(now, ladder, jitter_unit, ago, first_kind)| {
            // Usually a first attempt some time before now; sometimes any clock at all.
            let earlier = now.checked_sub(Duration::from_secs(ago)).unwrap_or(now);
            let first = if first_kind == 0 {
                clock().boxed()
            } else {
                Just(earlier).boxed()
            };
            // Mostly below max_attempts, so most retry verdicts reach the tier choice.
            let attempts = prop_oneof![
                6 => 0..=ladder.max_attempts(),
                1 => any::<u32>(),
            ];
            let hint = prop_oneof![
                1 => Just(None),
                2 => seconds().prop_map(Some),
                3 => date(now).prop_map(Some),
                1 => invalid().prop_map(Some),
                2 => garbage(now).prop_map(Some),
            ];
            let result = prop_oneof![
                5 => (status(), hint).prop_map(|(status, hint)| Attempt::Response { status, hint }),
                1 => select(FAILURE_KINDS.to_vec()).prop_map(Attempt::Failed),
            ];
            (result, first, attempts).prop_map(move |(result, first_attempt_at, attempts_made)| {
                Case {
                    now,
                    result,
                    ladder: ladder.clone(),
                    attempts_made,
                    first_attempt_at,
                    jitter_unit,
                }
            })
        })
        .boxed()
}

// ---------------------------------------------------------------------------------------
// The oracle: docs/design.md#classification and RFC 9110, written out independently of `classify`.

/// What the rules say about a status: the verdict (without its hint) and the outcome label
/// by class.
fn expected_for_status(status: u16) -> (Verdict, String) {
    let class = match status {
        100..=599 => format!("http_{}xx", status / 100),
        _ => "http_invalid".to_owned(),
    };
    let verdict = match status {
        200..=299 => Verdict::Delivered,
        300..=399 => Verdict::Rejected {
            reason: RejectReason::Redirect,
        },
        408 | 425 | 429 => Verdict::Retry { retry_after: None },
        // Gone for good: its own reason, which also disables the subscription.
        410 => Verdict::Rejected {
            reason: RejectReason::Gone,
        },
        400..=499 => Verdict::Rejected {
            reason: RejectReason::Http4xx,
        },
        // 5xx, a final 1xx, and codes outside 100..=599 (RFC 9110 §15: like a 5xx).
        _ => Verdict::Retry { retry_after: None },
    };
    (verdict, class)
}

fn nanos_since_epoch(t: SystemTime) -> i128 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_nanos() as i128,
        Err(e) => -(e.duration().as_nanos() as i128),
    }
}

/// The delay the hint means, when it is certain; `Err(())` when there is no expectation.
fn expected_hint(hint: &Hint, now: SystemTime) -> Result<Option<Duration>, ()> {
    let max = MAX_RETRY_AFTER.as_nanos() as i128;
    let clamp = |nanos: i128| Duration::from_nanos(nanos.clamp(0, max) as u64);
    match hint {
        Hint::Seconds(text) => {
            let digits = text.trim_matches([' ', '\t']).trim_start_matches('0');
            // More than 20 significant digits is beyond u64: clamped like any huge value.
            let secs: i128 = if digits.len() > 20 {
                i128::MAX / 1_000_000_000
            } else {
                digits.parse().unwrap_or(0)
            };
            Ok(Some(clamp(secs.saturating_mul(1_000_000_000))))
        }
        Hint::Date { at, .. } => {
            let at = i128::from(*at) * 1_000_000_000;
            Ok(Some(clamp(at - nanos_since_epoch(now))))
        }
        Hint::Invalid(_) => Ok(None),
        Hint::Garbage(_) => Err(()),
    }
}

#[derive(Default)]
struct Stats {
    cases: u64,
    verdicts: BTreeMap<&'static str, u64>,
    outcomes: BTreeMap<&'static str, u64>,
    hints: BTreeMap<String, u64>,
    ladder: BTreeMap<String, u64>,
    exact_ladder_checks: u64,
}

fn count<K: Ord>(map: &mut BTreeMap<K, u64>, key: K) {
    *map.entry(key).or_default() += 1;
}

fn check(case: &Case, stats: &mut Stats) -> Result<(), TestCaseError> {
    let (attempt, hint) = match &case.result {
        Attempt::Response { status, hint } => (
            AttemptResult::Response {
                status: *status,
                retry_after: hint.as_ref().map(|h| h.text().to_owned()),
            },
            hint.as_ref(),
        ),
        Attempt::Failed(kind) => (AttemptResult::Failed(*kind), None),
    };
    let c = classify(&attempt, case.now);
    prop_assert!(
        OUTCOMES.contains(&c.outcome.as_str()),
        "{} is not in OUTCOMES",
        c.outcome
    );
    count(&mut stats.outcomes, c.outcome.as_str());

    match &case.result {
        Attempt::Response { status, .. } => {
            let (verdict, class) = expected_for_status(*status);
            prop_assert_eq!(c.status, Some(*status));
            prop_assert!(
                c.outcome.as_str() == format!("http_{status}") || c.outcome.as_str() == class,
                "status {} labelled {}",
                status,
                c.outcome
            );
            match (verdict, c.verdict) {
                (Verdict::Retry { .. }, Verdict::Retry { retry_after }) => {
                    let parsed = hint.and_then(|h| parse_retry_after(h.text(), case.now));
                    prop_assert_eq!(retry_after, parsed, "classify uses parse_retry_after");
                }
                (expected, got) => prop_assert_eq!(got, expected, "status {}", status),
            }
        }
        Attempt::Failed(kind) => {
            let expected = match kind {
                FailureKind::EgressDenied => Verdict::Rejected {
                    reason: RejectReason::EgressDenied,
                },
                FailureKind::PayloadTooLarge => Verdict::Rejected {
                    reason: RejectReason::PayloadTooLarge,
                },
                FailureKind::InvalidUrl => Verdict::Rejected {
                    reason: RejectReason::InvalidUrl,
                },
                // Transport failures and a secret that may yet appear: wait and retry.
                _ => Verdict::Retry { retry_after: None },
            };
            prop_assert_eq!(c.verdict, expected);
            prop_assert_eq!(c.outcome, kind.as_str());
            prop_assert_eq!(c.status, None);
        }
    }
    count(
        &mut stats.verdicts,
        match c.verdict {
            Verdict::Delivered => "delivered",
            Verdict::Retry { .. } => "retry",
            Verdict::Rejected { reason } => reason.as_str(),
        },
    );

    // The hint on its own, whatever the status.
    if let Some(hint) = hint {
        let parsed = parse_retry_after(hint.text(), case.now);
        if let Some(d) = parsed {
            prop_assert!(d <= MAX_RETRY_AFTER, "{:?} parsed to {:?}", hint, d);
        }
        if let Ok(expected) = expected_hint(hint, case.now) {
            prop_assert_eq!(parsed, expected, "{:?} at {:?}", hint, case.now);
        }
        let how = match parsed {
            None => "ignored",
            Some(d) if d == MAX_RETRY_AFTER => "clamped to 7 days",
            Some(Duration::ZERO) => "zero (now or past)",
            Some(_) => "honoured",
        };
        count(&mut stats.hints, format!("{} {how}", hint.category()));
    }

    if let Verdict::Retry { retry_after } = c.verdict {
        check_ladder(case, retry_after, stats)?;
    }
    stats.cases += 1;
    Ok(())
}

fn check_ladder(
    case: &Case,
    hint: Option<Duration>,
    stats: &mut Stats,
) -> Result<(), TestCaseError> {
    let ladder = &case.ladder;
    let tiers = ladder.tiers();
    let decision = ladder.decide(
        case.attempts_made,
        case.first_attempt_at,
        case.now,
        hint,
        false,
        case.jitter_unit,
    );
    let last = tiers.len() - 1;
    let step = (case.attempts_made.max(1) as usize - 1).min(last);
    // The wait is the step or the hint (up to max_retry_after), whichever is longer;
    // the tier the last whose delay fits in it.
    let need = hint
        .unwrap_or_default()
        .min(ladder.max_retry_after())
        .max(tiers[step].delay);
    let cover = (0..tiers.len())
        .rev()
        .find(|&i| tiers[i].delay <= need)
        .unwrap_or(0);
    let deadline = case.first_attempt_at.checked_add(ladder.max_age());
    let label = match decision {
        RetryDecision::Retry { tier, due_at } => {
            prop_assert!(case.attempts_made < ladder.max_attempts());
            prop_assert_eq!(tier, cover, "the longest tier that fits the wait");
            let wait = due_at
                .duration_since(case.now)
                .map_err(|_| TestCaseError::fail("due before now"))?;
            prop_assert!(wait >= tiers[step].delay, "earlier than the ladder step");
            let honoured = hint.unwrap_or_default().min(ladder.max_retry_after());
            prop_assert!(wait >= honoured, "earlier than the hint");
            prop_assert!(wait >= tiers[tier].delay);
            prop_assert!(
                wait <= need + ladder.max_jitter(),
                "jitter beyond max_jitter"
            );
            if let Some(deadline) = deadline {
                prop_assert!(due_at <= deadline, "due after first_attempt_at + max_age");
            }
            stats.exact_ladder_checks += 1;
            format!("retry on tier {tier}")
        }
        RetryDecision::Exhausted {
            reason: ExhaustReason::MaxAttempts,
        } => {
            prop_assert!(case.attempts_made >= ladder.max_attempts());
            "exhausted: max_attempts".to_owned()
        }
        RetryDecision::Exhausted {
            reason: ExhaustReason::MaxAge,
        } => {
            prop_assert!(case.attempts_made < ladder.max_attempts());
            // Even with no jitter the wait ends past the deadline, or the clock is
            // so close to the end of time that `now + wait` does not exist.
            let earliest = case.now.checked_add(need);
            let latest = earliest.and_then(|t| t.checked_add(ladder.max_jitter()));
            match (earliest, latest, deadline) {
                (None, ..) => "exhausted: max_age (clock at the end of time)".to_owned(),
                (Some(_), None, _) => "exhausted: max_age (jitter past the end of time)".to_owned(),
                (Some(_), Some(latest), Some(deadline)) => {
                    prop_assert!(
                        latest > deadline,
                        "exhausted although due before the deadline"
                    );
                    "exhausted: max_age".to_owned()
                }
                (Some(_), Some(_), None) => {
                    return Err(TestCaseError::fail(
                        "max_age without a representable deadline",
                    ))
                }
            }
        }
    };
    count(&mut stats.ladder, label);
    Ok(())
}

fn join<K: std::fmt::Display>(map: &BTreeMap<K, u64>) -> String {
    let mut items: Vec<_> = map.iter().collect();
    items.sort_by(|a, b| b.1.cmp(a.1));
    items
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[test]
fn fuzz_classify_arbitrary_responses_and_ladder() {
    let cases = fuzz_cases(DEFAULT_CASES);
    let seed = fuzz_seed();
    let started = Instant::now();
    let stats = RefCell::new(Stats::default());
    let mut runner = TestRunner::new(Config {
        cases,
        rng_seed: RngSeed::Fixed(seed),
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&case(), |case| check(&case, &mut stats.borrow_mut()));
    let stats = stats.into_inner();
    eprintln!(
        "fuzz classify: {} cases in {:.1?}, HOOKLINE_FUZZ_SEED={seed}\n  verdicts: {}\n  \
         outcomes ({} of {} labels seen): {}\n  Retry-After: {}\n  ladder (retry verdicts): \
         {}\n  {} retries checked: never before the ladder step or the hint (up to \
         max_retry_after), the longest tier that fits, jitter within max_jitter, never past max_age",
        stats.cases,
        started.elapsed(),
        join(&stats.verdicts),
        stats.outcomes.len(),
        OUTCOMES.len(),
        join(&stats.outcomes),
        join(&stats.hints),
        join(&stats.ladder),
        stats.exact_ladder_checks,
    );
    if let Err(e) = result {
        panic!("{e}\n(replay with HOOKLINE_FUZZ_SEED={seed})");
    }
}
