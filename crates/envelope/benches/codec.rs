//! The cost of the contract codec per record: decoding and encoding a
//! `Delivery` as the dispatcher sees it (512-byte payload, two attributes,
//! a traceparent), in nanoseconds per record, read straight into the Rust
//! type (a current writer's record) and through apache-avro's `Value` (an
//! older writer's, resolved). Prints figures; asserts nothing.
//!
//! `cargo bench -p hookline-envelope --bench codec`
//! Parameters (env): BENCH_RECORDS per pass (default 200000), BENCH_PAYLOAD
//! bytes (default 512).

use std::{
    hint::black_box,
    time::{Duration, Instant},
};

use hookline_envelope::{decode, encode, fixtures::DeliveryBuilder, Delivery, Registry};

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn delivery(payload: usize) -> Delivery {
    DeliveryBuilder::new(
        "dlv_01JEXAMPLE0000000000000000",
        "tenant-0042",
        "sub-0042-1",
    )
    .event_id("evt_01JEXAMPLE0000000000000000")
    .event_type("invoice.paid")
    .at(1_764_700_000_001)
    .occurred_at(1_764_700_000_000)
    .payload(&vec![b'x'; payload])
    .attribute("region", "eu-west-1")
    .attribute("source", "billing")
    .traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
    .build()
}

/// The best of five passes, in nanoseconds per call.
fn per_call(records: usize, mut f: impl FnMut()) -> f64 {
    (0..5)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..records {
                f();
            }
            start.elapsed()
        })
        .min()
        .unwrap_or(Duration::ZERO)
        .as_nanos() as f64
        / records as f64
}

fn main() {
    let records = env_usize("BENCH_RECORDS", 200_000);
    let d = delivery(env_usize("BENCH_PAYLOAD", 512));
    let bytes = encode(&d);
    assert_eq!(decode::<Delivery>(&bytes).ok(), Some(d.clone()));

    let decoding = per_call(records, || {
        black_box(decode::<Delivery>(black_box(&bytes)).ok());
    });
    let by_value = per_call(records, || {
        black_box(
            Registry::global()
                .decode_by_value::<Delivery>(black_box(&bytes))
                .ok(),
        );
    });
    let encoding = per_call(records, || {
        black_box(encode(black_box(&d)));
    });
    println!(
        "codec            Delivery of {} bytes, best of 5 passes of {records}",
        bytes.len()
    );
    println!("                 decode  {decoding:>8.0} ns/record (read straight into the type)");
    println!("                 decode  {by_value:>8.0} ns/record (through apache-avro's Value, as an older writer's record)");
    println!("                 encode  {encoding:>8.0} ns/record");
}
