//! The transactional producer with two producers taking turns
//! (`TxnSpec::producers`), on real Kafka: consume-transform-produce
//! transactions alternate between the two transactional ids, an aborted one
//! between them leaves nothing behind, a `read_committed` reader sees every
//! committed record once and in order, the group's committed offset ends at
//! the last transaction's, and a restart under the same id fences both turns.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use hookline_runtime::kafka::txn::{Transactor, TxnError, TxnSpec};
use hookline_testkit::kafka;
use rdkafka::{
    consumer::{Consumer, StreamConsumer},
    error::KafkaError,
    Message, Offset, TopicPartitionList,
};
use tokio_util::sync::CancellationToken;

const RECORDS: usize = 7;

fn spec(transactional_id: &str) -> TxnSpec {
    TxnSpec {
        client_id: "txn-turns-test",
        transactional_id: transactional_id.to_owned(),
        transaction_timeout: Duration::from_secs(20),
        call_timeout: Duration::from_secs(20),
        linger: Duration::from_millis(1),
        producers: 2,
    }
}

/// The input offsets up to `next` (exclusive), with the group's metadata.
fn offsets(
    consumer: &StreamConsumer,
    topic: &str,
    next: i64,
) -> Vec<hookline_runtime::kafka::txn::GroupOffsets> {
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Offset(next))
        .unwrap();
    vec![(tpl, consumer.group_metadata().unwrap())]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_take_turns_commit_in_order_and_a_restart_fences_both() {
    hookline_testkit::logs::init();
    let (input, output) = (
        kafka::unique_name("turns-in"),
        kafka::unique_name("turns-out"),
    );
    let group = kafka::unique_name("turns-group");
    kafka::create_topics(&[(&input, 1), (&output, 1)], &[])
        .await
        .unwrap();
    let records: Vec<(Vec<u8>, Vec<u8>)> = (0..RECORDS)
        .map(|i| (b"k".to_vec(), format!("in-{i}").into_bytes()))
        .collect();
    kafka::produce_many(&kafka::producer(), &input, records)
        .await
        .unwrap();

    let consumer = kafka::consumer(&group);
    consumer.subscribe(&[&input]).unwrap();
    let mut consumed = Vec::new();
    while consumed.len() < RECORDS {
        let msg = tokio::time::timeout(Duration::from_secs(30), consumer.recv())
            .await
            .expect("the input records arrive")
            .unwrap();
        consumed.push((msg.offset(), msg.payload().unwrap().to_vec()));
    }

    let id = kafka::unique_name("turns-txn");
    let mut txn = Transactor::new(&common::args(), spec(&id)).await.unwrap();
    let stop = CancellationToken::new();
    let mut used = Vec::new();
    for (offset, payload) in &consumed {
        // An aborted transaction before the fourth record's: its record is
        // never readable, and the next transaction goes on from the other
        // producer's turn.
        if *offset == 3 {
            txn.begin().unwrap();
            txn.send(&output, Some(b"k"), b"aborted").await.unwrap();
            txn.recover(&TxnError::Abortable(KafkaError::Canceled), &stop)
                .await
                .unwrap();
        }
        txn.begin().unwrap();
        used.push(txn.transactional_id().to_owned());
        let out = [b"out-".as_slice(), payload].concat();
        txn.send(&output, Some(b"k"), &out).await.unwrap();
        txn.commit(offsets(&consumer, &input, offset + 1))
            .await
            .unwrap();
    }

    // Two ids, taking turns (the abort took a turn too).
    let mut ids = used.clone();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 2, "{used:?}");
    assert!(ids.contains(&id), "{ids:?}");
    assert_eq!(
        used[0..3].windows(2).filter(|w| w[0] == w[1]).count(),
        0,
        "{used:?}"
    );
    assert_eq!(
        used[3..].windows(2).filter(|w| w[0] == w[1]).count(),
        0,
        "{used:?}"
    );

    // Every committed record once, in order, nothing of the aborted one.
    let read: Vec<String> = kafka::read_to_end(&output)
        .await
        .unwrap()
        .iter()
        .map(|m| String::from_utf8(m.payload().unwrap().to_vec()).unwrap())
        .collect();
    let want: Vec<String> = (0..RECORDS).map(|i| format!("out-in-{i}")).collect();
    assert_eq!(read, want);
    let (committed, high) = kafka::group_progress(&group, &input).await.unwrap();
    assert_eq!((committed, high), (RECORDS as i64, RECORDS as i64));

    // A restart under the same id fences both of the old instance's turns.
    let _successor = Transactor::new(&common::args(), spec(&id)).await.unwrap();
    for turn in 0..2 {
        let fenced = async {
            txn.begin()?;
            txn.send(&output, Some(b"k"), b"zombie").await?;
            txn.commit(offsets(&consumer, &input, RECORDS as i64)).await
        }
        .await;
        assert!(
            matches!(fenced, Err(TxnError::Fatal(_))),
            "turn {turn} of the old instance was not fenced: {fenced:?}"
        );
    }
    let read = kafka::read_to_end(&output).await.unwrap();
    assert_eq!(
        read.len(),
        RECORDS,
        "a fenced producer's record is readable"
    );
}
