//! At least once into the archive across a crash, once per coordinate out of it: the real
//! `hookline-dlq-sink` binary is killed with SIGKILL while dead letters flow, then
//! restarted; every produced record's coordinates end up in the archive (copies allowed),
//! none lost, and `inspect` reads each once and reports the copies it skipped.

#![allow(clippy::unwrap_used)]

mod common;

use std::{
    collections::{HashMap, HashSet},
    process::Command,
    sync::{Arc, Mutex},
    time::Duration,
};

use common::{archived_coords, dead_letter, wait_for_archive, Coords, Env};
use hookline_envelope::{decode, encode, Delivery};
use hookline_testkit::kafka;
use rdkafka::{
    consumer::{BaseConsumer, CommitMode, Consumer},
    message::Message,
    Offset, TopicPartitionList,
};

const RECORDS: usize = 3000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_mid_stream_and_restart_loses_no_row() {
    let env = Arc::new(Env::new("sink-crash").await);
    let extra = ["--group-session-timeout", "6s"];
    let mut first = env.spawn(&extra);

    let produced = Arc::new(Mutex::new(Vec::new()));
    let producer = {
        let (env, produced) = (Arc::clone(&env), Arc::clone(&produced));
        tokio::spawn(async move {
            for batch in 0..(RECORDS / 50) {
                let sends = (0..50).map(|i| {
                    let n = batch * 50 + i;
                    let tenant = format!("tenant-{}", n % 7);
                    let bytes = encode(&dead_letter(&tenant, n, "exhausted"));
                    let env = Arc::clone(&env);
                    async move {
                        env.send(env.topics.dlq(), Some(tenant.as_bytes()), &bytes, None)
                            .await
                    }
                });
                let coords = futures::future::join_all(sends).await;
                produced.lock().unwrap().extend(coords);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };

    // Let the first sink archive part of the stream, then kill it mid-stream.
    wait_for_archive(env.archive_dir(), Duration::from_secs(60), |got| {
        got.len() >= 300
    })
    .await;
    first.kill();
    let produced_at_kill = produced.lock().unwrap().len();
    let archived_at_kill = archived_coords(env.archive_dir()).len();
    assert!(
        produced_at_kill < RECORDS,
        "the kill must land while records still flow ({produced_at_kill} produced)"
    );

    let mut second = env.spawn(&extra);
    producer.await.unwrap();
    let want: HashSet<_> = produced.lock().unwrap().iter().cloned().collect();
    assert_eq!(want.len(), RECORDS);
    let expect = want.clone();
    wait_for_archive(env.archive_dir(), Duration::from_secs(120), move |got| {
        let got: HashSet<_> = got.iter().collect();
        expect.iter().all(|c| got.contains(c))
    })
    .await;

    // A clean stop after the restart: SIGTERM drains and exits 0.
    let status = Command::new("kill")
        .args(["-TERM", &second.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = tokio::task::spawn_blocking(move || second.wait().unwrap())
        .await
        .unwrap();
    assert!(exit.success(), "sink exited with {exit:?} after SIGTERM");

    let archived = archived_coords(env.archive_dir());
    let mut counts: HashMap<_, usize> = HashMap::new();
    for c in &archived {
        *counts.entry(c.clone()).or_default() += 1;
    }
    let missing = want.iter().filter(|c| !counts.contains_key(*c)).count();
    let duplicated = counts.values().filter(|n| **n > 1).count();
    eprintln!(
        "killed at {archived_at_kill} archived / {produced_at_kill} produced; \
         {} rows for {RECORDS} records, {duplicated} duplicated, {missing} missing",
        archived.len()
    );
    assert_eq!(missing, 0);

    // However many copies the crash left, inspect reads each coordinate once.
    let (code, stdout, stderr) = env.cli(&["inspect", "--from-archive", "--output", "json"]);
    assert_eq!(code, 0, "{stderr}");
    let listed: HashSet<&str> = stdout.lines().collect();
    assert_eq!(stdout.lines().count(), RECORDS);
    assert_eq!(listed.len(), RECORDS, "one line per coordinate");
    let summary: serde_json::Value = stderr
        .lines()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no JSON summary on stderr: {stderr}"));
    assert_eq!(
        summary,
        serde_json::json!({
            "scanned": RECORDS,
            "matched": RECORDS,
            "duplicates_skipped": archived.len() - RECORDS,
        })
    );
}

/// The crash this file is about, made deterministic: the sink archives every record and
/// commits, then the group's offsets are put back to the start, exactly as if the sink had
/// died after its archive writes were durable and before their commit. The restarted sink
/// re-reads and files every record a second time (the sink does not de-duplicate); `inspect`
/// and `replay` from the archive still see, count and replay each coordinate once, and
/// report the copies they skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_archived_twice_by_a_lost_commit_are_inspected_and_replayed_once() {
    const N: usize = 30;
    let env = Env::new("sink-lost-commit").await;
    let dlq = env.topics.dlq().to_owned();
    let mut want = HashSet::new();
    for n in 0..N {
        let tenant = format!("tenant-{}", n % 5);
        let bytes = encode(&dead_letter(&tenant, n, "exhausted"));
        want.insert(env.send(&dlq, Some(tenant.as_bytes()), &bytes, None).await);
    }
    let sink = env.start(&[]);
    kafka::wait_committed_to_end(&env.group, &dlq, Duration::from_secs(60)).await;
    sink.stop().await;
    assert_eq!(count_copies(&archived_coords(env.archive_dir())), (N, 1));

    rewind_group(&env.group, &dlq).await;
    assert_eq!(
        kafka::group_progress(&env.group, &dlq).await.unwrap(),
        (0, N as i64),
        "the commit is lost"
    );
    let sink = env.start(&[]);
    kafka::wait_committed_to_end(&env.group, &dlq, Duration::from_secs(60)).await;
    sink.stop().await;
    let archived = archived_coords(env.archive_dir());
    assert_eq!(
        count_copies(&archived),
        (N, 2),
        "the restarted sink files every uncommitted record again"
    );
    assert_eq!(archived.iter().cloned().collect::<HashSet<_>>(), want);

    // inspect lists each coordinate once and says how many copies it skipped.
    let (code, stdout, stderr) = env.cli(&["inspect", "--from-archive", "--output", "json"]);
    assert_eq!(code, 0, "{stderr}");
    let listed: Vec<Coords> = stdout
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let topic = v["topic"].as_str().unwrap().to_owned();
            let partition = i32::try_from(v["partition"].as_i64().unwrap()).unwrap();
            (topic, partition, v["offset"].as_i64().unwrap())
        })
        .collect();
    assert_eq!(listed.len(), N, "{stdout}");
    assert_eq!(listed.into_iter().collect::<HashSet<_>>(), want);
    let summary: serde_json::Value = stderr
        .lines()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no JSON summary on stderr: {stderr}"));
    assert_eq!(
        summary,
        serde_json::json!({"scanned": N, "matched": N, "duplicates_skipped": N})
    );

    // Counting counts each once.
    let (code, stdout, stderr) = env.cli(&["inspect", "--from-archive", "--count-by", "tenant"]);
    assert_eq!(code, 0, "{stderr}");
    let counted: u64 = stdout
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().last().unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(counted, N as u64, "{stdout}");
    assert!(
        stderr.contains(&format!("scanned {N}, matched {N}, duplicates skipped {N}")),
        "{stderr}"
    );

    // The topic itself has each record once.
    let (code, _, stderr) = env.cli(&["inspect", "--count-by", "reason"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains(&format!("scanned {N}, matched {N}, duplicates skipped 0")),
        "{stderr}"
    );

    // replay writes one delivery per dead letter, however many copies the archive holds.
    let (code, stdout, stderr) = env.cli(&["replay", "--from-archive", "--execute"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains(&format!(
            "scanned {N}, matched {N}, replayed {N}, failed 0, refused 0, duplicates skipped {N}"
        )),
        "{stdout}"
    );
    let mut replayed: HashMap<Coords, usize> = HashMap::new();
    for msg in kafka::read_to_end(env.topics.deliveries()).await.unwrap() {
        let d: Delivery = decode(msg.payload().unwrap()).unwrap();
        let of = d.replay_of.expect("replay_of set");
        *replayed
            .entry((of.topic, of.partition, of.offset))
            .or_default() += 1;
    }
    assert_eq!(replayed.keys().cloned().collect::<HashSet<_>>(), want);
    assert!(replayed.values().all(|n| *n == 1), "{replayed:?}");
}

/// (distinct coordinates, copies of each) when every coordinate has the same number of
/// copies; panics otherwise.
fn count_copies(coords: &[Coords]) -> (usize, usize) {
    let mut counts: HashMap<&Coords, usize> = HashMap::new();
    for c in coords {
        *counts.entry(c).or_default() += 1;
    }
    let copies: HashSet<usize> = counts.values().copied().collect();
    assert_eq!(copies.len(), 1, "uneven copies: {counts:?}");
    (counts.len(), copies.into_iter().next().unwrap())
}

/// Commits offset 0 on every partition of `topic` for `group` (no member may be in it), as
/// a crash before the commit leaves it. Asked again while the group is still settling
/// after its last member left.
async fn rewind_group(group: &str, topic: &str) {
    let (group, topic) = (group.to_owned(), topic.to_owned());
    tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = kafka::client_config()
            .set("group.id", &group)
            .set("enable.auto.commit", "false")
            .create()
            .unwrap();
        let metadata = consumer
            .fetch_metadata(Some(&topic), Duration::from_secs(10))
            .unwrap();
        let mut tpl = TopicPartitionList::new();
        for p in metadata.topics()[0].partitions() {
            tpl.add_partition_offset(&topic, p.id(), Offset::Offset(0))
                .unwrap();
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            match consumer.commit(&tpl, CommitMode::Sync) {
                Ok(()) => return,
                Err(e) if std::time::Instant::now() < deadline => {
                    eprintln!("rewinding {group}: {e}; again");
                    std::thread::sleep(Duration::from_millis(500));
                }
                Err(e) => panic!("cannot rewind {group}: {e}"),
            }
        }
    })
    .await
    .unwrap();
}
