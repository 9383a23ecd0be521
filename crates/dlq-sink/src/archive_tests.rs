#![allow(clippy::unwrap_used)]

use std::time::Duration;

use apache_avro::{from_value, Reader};

use super::*;
use crate::row::{ArchiveRow, Kind, UNDECODABLE};

fn limits() -> Limits {
    Limits {
        max_file_bytes: 10_000,
        max_file_age: Duration::from_secs(60),
        max_buffered_bytes: 50_000,
        max_open_files: 100,
    }
}

fn row(partition: i32, offset: i64, tenant: &str, value_len: usize) -> ArchiveRow {
    ArchiveRow {
        topic: "deliveries.dlq".into(),
        partition,
        offset,
        kafka_timestamp: Some(1_795_996_000_000),
        key: Some(tenant.as_bytes().to_vec()),
        headers: vec![],
        kind: "dlq".into(),
        record_type: "DeadLetter".into(),
        tenant_id: Some(tenant.into()),
        subscription_id: Some("sub".into()),
        event_type: Some("invoice.paid".into()),
        event_id: Some("ev".into()),
        delivery_id: Some("d".into()),
        reason: "exhausted".into(),
        attempt: Some(8),
        last_status: Some(503),
        dead_at: Some(1_795_996_000_000),
        detail: None,
        value: Some(vec![7; value_len]),
        decode_error: None,
        archived_at: 1_795_996_000_001,
    }
}

#[test]
fn commits_stop_at_the_first_row_not_yet_durable() {
    let mut files = OpenFiles::new(limits());
    // Partition 0: offsets 0..4, alternating between two tenants (two files).
    for offset in 0..4 {
        let tenant = if offset % 2 == 0 { "a" } else { "b" };
        files
            .append(Kind::Dlq, &row(0, offset, tenant, 10), 0)
            .unwrap();
    }
    assert_eq!(files.committable(), vec![("deliveries.dlq".into(), 0, 0)]);

    let keys = files.all();
    let b = keys.iter().find(|k| k.tenant == "b").unwrap().clone();
    let a = keys.iter().find(|k| k.tenant == "a").unwrap().clone();
    // Tenant b's file (offsets 1, 3) written first: a's offset 0 still holds the commit.
    let sealed = files.seal(&b).unwrap().unwrap();
    assert_eq!(sealed.rows, 2);
    files.written(&b);
    assert_eq!(files.committable(), vec![("deliveries.dlq".into(), 0, 0)]);
    // Sealed but not yet durable also holds it.
    files.seal(&a).unwrap().unwrap();
    assert_eq!(files.committable(), vec![("deliveries.dlq".into(), 0, 0)]);
    files.written(&a);
    assert_eq!(files.committable(), vec![("deliveries.dlq".into(), 0, 4)]);
}

#[test]
fn files_are_due_by_size_age_and_buffer_pressure() {
    let mut files = OpenFiles::new(limits());
    files.append(Kind::Dlq, &row(0, 0, "a", 100), 0).unwrap();
    assert!(files.due(59_999).is_empty());
    assert_eq!(files.due(60_000).len(), 1, "age");

    let mut files = OpenFiles::new(limits());
    files
        .append(Kind::Dlq, &row(0, 0, "big", 10_000), 0)
        .unwrap();
    files.append(Kind::Dlq, &row(1, 0, "small", 10), 0).unwrap();
    let due = files.due(1);
    assert_eq!(due.len(), 1, "size");
    assert_eq!(due[0].tenant, "big");

    // Six files of ~9 KB each exceed the 50 KB buffer: the largest go first.
    let mut files = OpenFiles::new(limits());
    for (i, len) in [8_800, 8_700, 8_600, 8_500, 8_400, 8_300]
        .iter()
        .enumerate()
    {
        files
            .append(Kind::Dlq, &row(i as i32, 0, "t", *len), 0)
            .unwrap();
    }
    let due = files.due(1);
    assert_eq!(due.len(), 1);
    assert_eq!(due[0].partition, 0);
}

#[test]
fn sealed_files_read_back_with_every_field_and_a_hive_path() {
    let mut files = OpenFiles::new(limits());
    let mut undecodable = row(3, 41, "x", 3);
    undecodable.tenant_id = None;
    undecodable.reason = UNDECODABLE.into();
    undecodable.decode_error = Some("not avro".into());
    let rows = vec![row(3, 40, "acme:eu", 20), undecodable];
    for r in &rows {
        files.append(Kind::Dlq, r, 1_000).unwrap();
    }
    let mut sealed: Vec<_> = files
        .all()
        .iter()
        .map(|k| files.seal(k).unwrap().unwrap())
        .collect();
    sealed.sort_by_key(|f| f.first_offset);
    assert_eq!(
        sealed[0].relative_path,
        "kind=dlq/date=2026-11-29/tenant=acme_3Aeu/part-1000-deliveries.dlq-3-40.avro"
    );
    assert_eq!(
        sealed[1].relative_path,
        "kind=dlq/date=2026-11-29/tenant=_unknown/part-1000-deliveries.dlq-3-41.avro"
    );
    for (file, want) in sealed.iter().zip(&rows) {
        let read: Vec<ArchiveRow> = Reader::new(&file.bytes[..])
            .unwrap()
            .map(|v| from_value(&v.unwrap()).unwrap())
            .collect();
        assert_eq!(read, vec![want.clone()]);
    }
    assert_eq!(sealed[1].reasons.get(UNDECODABLE), Some(&1));
}

#[test]
fn a_revoked_partition_is_forgotten() {
    let mut files = OpenFiles::new(limits());
    files.append(Kind::Dlq, &row(0, 5, "a", 1), 0).unwrap();
    files.append(Kind::Dlq, &row(1, 9, "b", 1), 0).unwrap();
    assert_eq!(files.drop_partition("deliveries.dlq", 0), 1);
    assert_eq!(files.committable(), vec![("deliveries.dlq".into(), 1, 9)]);
    assert_eq!(files.buffered_rows(), 1);
}
