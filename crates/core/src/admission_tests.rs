use proptest::prelude::*;

use super::*;

const W: Duration = Duration::from_secs(300);
const SAME: Admission = Admission::Duplicate(PayloadMatch::Same);
const CHANGED: Admission = Admission::Duplicate(PayloadMatch::Changed);

fn k(n: u128) -> KeyHash {
    KeyHash([n as u64, (n >> 64) as u64])
}

fn fp(n: u64) -> Fingerprint {
    Fingerprint(n)
}

/// Feeds (key, fingerprint, timestamp) records and returns the decisions.
fn decide(window: &mut AdmissionWindow, records: &[(u128, u64, i64)]) -> Vec<Admission> {
    records
        .iter()
        .map(|&(key, f, t)| window.observe(k(key), fp(f), t).admission)
        .collect()
}

#[test]
fn decisions_follow_the_record_timestamps() {
    let s = 1_000_000;
    let w = 300_000;
    type Case = (&'static str, Vec<(u128, u64, i64)>, Vec<Admission>);
    let cases: Vec<Case> = vec![
        (
            "a repeat within the window is a duplicate",
            vec![(1, 7, s), (1, 7, s + 1_000)],
            vec![Admission::Admit, SAME],
        ),
        (
            "the window's edge is inclusive",
            vec![(1, 7, s), (2, 7, s + w), (1, 7, s + w)],
            vec![Admission::Admit, Admission::Admit, SAME],
        ),
        (
            "one past the edge is admitted again",
            vec![(1, 7, s), (2, 7, s + w + 1), (1, 7, s + w + 1)],
            vec![Admission::Admit, Admission::Admit, Admission::Admit],
        ),
        (
            "another payload under the same key is a changed duplicate",
            vec![(1, 7, s), (1, 8, s + 1)],
            vec![Admission::Admit, CHANGED],
        ),
        (
            "the payload is compared with the key's previous record",
            vec![(1, 7, s), (1, 8, s + 1), (1, 8, s + 2), (1, 7, s + 3)],
            vec![Admission::Admit, CHANGED, SAME, CHANGED],
        ),
        (
            "other keys do not interfere",
            vec![(1, 7, s), (2, 7, s), (3, 9, s), (2, 7, s + 5)],
            vec![Admission::Admit, Admission::Admit, Admission::Admit, SAME],
        ),
        (
            "a duplicate refreshes the entry (seen, not admitted)",
            vec![(1, 7, s), (1, 7, s + 200_000), (1, 7, s + 450_000)],
            vec![Admission::Admit, SAME, SAME],
        ),
        (
            "a late timestamp is judged against the stream time, not its own",
            vec![(1, 7, s), (2, 7, s + w + 10), (1, 7, s + 5)],
            vec![Admission::Admit, Admission::Admit, Admission::Admit],
        ),
        (
            "a late record still within the window is a duplicate",
            vec![(1, 7, s + 10), (2, 7, s + 20), (1, 7, s)],
            vec![Admission::Admit, Admission::Admit, SAME],
        ),
        (
            "a record older than the window keeps nothing",
            vec![(2, 7, s + w + 10), (1, 7, s), (1, 7, s + 1)],
            vec![Admission::Admit, Admission::Admit, Admission::Admit],
        ),
    ];
    for (name, records, expected) in cases {
        let mut window = AdmissionWindow::new(W, 1_000);
        assert_eq!(decide(&mut window, &records), expected, "{name}");
    }
}

#[test]
fn expired_keys_are_evicted_and_memory_follows_the_window() {
    let mut window = AdmissionWindow::new(Duration::from_secs(10), 1_000);
    for i in 0..100 {
        window.observe(k(i), fp(0), i64::try_from(i).unwrap() * 1_000);
    }
    // Stream time 99 s: keys seen at 89..=99 s are live.
    assert_eq!(window.len(), 11);
    assert_eq!(window.stream_time(), Some(99_000));
    assert_eq!(window.by_time.len(), window.entries.len());
}

#[test]
fn the_cap_evicts_the_oldest_early_and_counts_it() {
    let mut window = AdmissionWindow::new(W, 3);
    let evicted: Vec<usize> = (0..5)
        .map(|i| {
            window
                .observe(k(i), fp(0), 1_000 + i64::try_from(i).unwrap())
                .evicted_early
        })
        .collect();
    assert_eq!(evicted, [0, 0, 0, 1, 1]);
    assert_eq!(window.len(), 3);
    // Keys 0 and 1 went early: a repeat is admitted again (the window was
    // shortened for them); 4 is still held.
    assert_eq!(
        window.observe(k(0), fp(0), 1_010).admission,
        Admission::Admit
    );
    assert_eq!(window.observe(k(4), fp(0), 1_010).admission, SAME);
    // A repeat of a held key needs no room.
    assert_eq!(window.observe(k(4), fp(0), 1_011).evicted_early, 0);
}

#[test]
fn rebuild_starts_one_window_before_the_stream_time() {
    assert_eq!(rebuild_from(1_000_000, W), 700_000);
    assert_eq!(rebuild_from(i64::MIN + 5, W), i64::MIN);
    assert_eq!(rebuild_from(0, Duration::MAX), -i64::MAX);
}

/// Records on one partition: few keys and fingerprints so that repeats are
/// common, timestamps that mostly advance but also jump back.
fn records() -> impl Strategy<Value = Vec<(u128, u64, i64)>> {
    prop::collection::vec((0u128..12, 0u64..3, -40i64..60), 0..150).prop_map(|steps| {
        let mut t = 1_000_000i64;
        steps
            .into_iter()
            .map(|(key, f, dt)| {
                t += dt;
                (key, f, t)
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    /// The rebuild of `service.rs`: at a commit after record `cut`, the stream time
    /// is committed; a new owner replays from the first record whose timestamp is
    /// at least one window before it and then decides every later record exactly
    /// as the live window does.
    #[test]
    fn a_window_rebuilt_from_the_committed_stream_time_decides_like_the_live_one(
        records in records(),
        cut in any::<prop::sample::Index>(),
        window_ms in 1u64..200,
    ) {
        let window = Duration::from_millis(window_ms);
        let cut = if records.is_empty() { 0 } else { cut.index(records.len() + 1) };
        let mut live = AdmissionWindow::new(window, usize::MAX);
        let mut live_after = Vec::new();
        let mut committed_stream_time = None;
        for (i, &(key, f, t)) in records.iter().enumerate() {
            if i == cut {
                committed_stream_time = live.stream_time();
            }
            let decision = live.observe(k(key), fp(f), t).admission;
            if i >= cut {
                live_after.push(decision);
            }
        }
        let mut rebuilt = AdmissionWindow::new(window, usize::MAX);
        if let Some(stream_time) = committed_stream_time {
            let from = rebuild_from(stream_time, window);
            let start = records[..cut].iter().position(|r| r.2 >= from).unwrap_or(cut);
            decide(&mut rebuilt, &records[start..cut]);
            prop_assert_eq!(rebuilt.stream_time(), Some(stream_time));
        }
        let rebuilt_after = decide(&mut rebuilt, &records[cut..]);
        prop_assert_eq!(rebuilt_after, live_after);
    }

    /// Never more keys than the cap, and the time index always matches the map.
    #[test]
    fn the_cap_holds_and_the_index_matches(
        records in records(),
        cap in 1usize..8,
        window_ms in 1u64..200,
    ) {
        let mut window = AdmissionWindow::new(Duration::from_millis(window_ms), cap);
        for &(key, f, t) in &records {
            window.observe(k(key), fp(f), t);
            prop_assert!(window.len() <= cap);
            prop_assert_eq!(window.by_time.len(), window.entries.len());
            for (key, e) in &window.entries {
                prop_assert!(window.by_time.contains(&(e.last_seen, *key)));
            }
        }
    }
}
