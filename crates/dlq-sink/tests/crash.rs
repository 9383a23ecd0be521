//! At least once across a crash: the real `hookline-dlq-sink` binary is killed with SIGKILL
//! while dead letters flow, then restarted; every produced record's coordinates end up in
//! the archive (duplicates allowed, deduplicable by coordinates), none lost.

mod common;

use std::{
    collections::{HashMap, HashSet},
    process::Command,
    sync::{Arc, Mutex},
    time::Duration,
};

use common::{archived_coords, dead_letter, wait_for_archive, Env};
use hookline_envelope::encode;

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
    first.kill().expect("SIGKILL the sink");
    first.wait().unwrap();
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
}
