//! Command-line access to the contract for cross-language tests (`tests/contract/`).
//!
//! ```text
//! contract_tool encode <Record>        JSON on stdin  -> hex single-object bytes on stdout
//! contract_tool decode <Record>        hex on stdin   -> JSON on stdout (exit 2 + error on stderr)
//! contract_tool fingerprint <Record>   -> fingerprint as 16 hex digits of its LE bytes, then the canonical form
//! contract_tool delivery-id <event_id> <subscription_id>
//! ```
//!
//! JSON is serde's form of the record types: `bytes` fields are arrays of integers 0..=255,
//! timestamps are integers (ms), optional fields are `null` or the value.

use std::{
    io::{self, Read},
    process::ExitCode,
};

use anyhow::{anyhow, bail, Context};
use hookline_envelope::{
    decode, delivery_id, encode, AttemptRecord, DeadLetter, Delivery, DomainEvent, EndpointHealth,
    QuarantinedEvent, Record, RecordKind, Subscription,
};

fn main() -> ExitCode {
    match run(std::env::args().skip(1).collect()) {
        Ok(out) => {
            println!("{out}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(args: Vec<String>) -> anyhow::Result<String> {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        ["encode", record] => {
            let json = stdin()?;
            dispatch(record.parse()?, Op::Encode(&json))
        }
        ["decode", record] => {
            let hex = stdin()?;
            dispatch(record.parse()?, Op::Decode(hex.trim()))
        }
        ["fingerprint", record] => {
            let known = record.parse::<RecordKind>()?.current();
            Ok(format!(
                "{}\n{}",
                to_hex(&known.fingerprint().to_le_bytes()),
                known.canonical_form()
            ))
        }
        ["delivery-id", event_id, subscription_id] => Ok(delivery_id(event_id, subscription_id)),
        _ => bail!(
            "usage: contract_tool encode|decode|fingerprint <Record> | delivery-id <event_id> <subscription_id>"
        ),
    }
}

enum Op<'a> {
    Encode(&'a str),
    Decode(&'a str),
}

fn dispatch(kind: RecordKind, op: Op<'_>) -> anyhow::Result<String> {
    match kind {
        RecordKind::DomainEvent => apply::<DomainEvent>(op),
        RecordKind::Subscription => apply::<Subscription>(op),
        RecordKind::Delivery => apply::<Delivery>(op),
        RecordKind::DeadLetter => apply::<DeadLetter>(op),
        RecordKind::QuarantinedEvent => apply::<QuarantinedEvent>(op),
        RecordKind::AttemptRecord => apply::<AttemptRecord>(op),
        RecordKind::EndpointHealth => apply::<EndpointHealth>(op),
    }
}

fn apply<T: Record>(op: Op<'_>) -> anyhow::Result<String> {
    match op {
        Op::Encode(json) => {
            let record: T = serde_json::from_str(json).context("parsing JSON record")?;
            Ok(to_hex(&encode(&record)))
        }
        Op::Decode(hex) => {
            let record: T = decode(&from_hex(hex)?)?;
            Ok(serde_json::to_string(&record)?)
        }
    }
}

fn stdin() -> anyhow::Result<String> {
    let mut s = String::new();
    io::stdin().read_to_string(&mut s)?;
    Ok(s)
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn from_hex(s: &str) -> anyhow::Result<Vec<u8>> {
    if s.len() % 2 != 0 {
        bail!("odd number of hex digits");
    }
    (0..s.len())
        .step_by(2)
        .map(|i| {
            s.get(i..i + 2)
                .and_then(|pair| u8::from_str_radix(pair, 16).ok())
                .ok_or_else(|| anyhow!("bad hex at {i}"))
        })
        .collect()
}
