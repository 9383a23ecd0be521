//! The compiled-in schemas are `schemas/*.avsc`, well documented, self-contained, consistent
//! with each other, and fingerprinted exactly as other Avro libraries fingerprint them.

use hookline_envelope::{crc64_avro, RecordKind, Registry};

/// Changing a schema changes its fingerprint: every reader must then learn the old version
/// (see `schema::HISTORY`). Update these only together with such a change. The values are
/// also what fastavro computes (tests/contract).
#[test]
fn fingerprints_are_pinned() {
    let pinned = [
        (RecordKind::DomainEvent, "d9460691819bc65b"),
        (RecordKind::Subscription, "7592586b483e3599"),
        (RecordKind::Delivery, "6b3ad52d17e31a4a"),
        (RecordKind::DeadLetter, "fd41a47742f439e2"),
        (RecordKind::QuarantinedEvent, "b3ebb17e789552b9"),
        (RecordKind::AttemptRecord, "1e1cea3f3854c3ec"),
        (RecordKind::EndpointHealth, "2a4c1bc14674ed08"),
    ];
    for (kind, want) in pinned {
        let le: String = kind
            .current()
            .fingerprint()
            .to_le_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(le, want, "{kind}");
    }
}

/// The older versions readers still accept: each is a file `schemas/history/<file>.<fp>.avsc`
/// whose name carries its own fingerprint, and none is a current schema.
#[test]
fn history_files_are_named_by_their_fingerprint() {
    let registry = Registry::builtin().unwrap();
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../schemas/history");
    let mut files = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let json = std::fs::read_to_string(&path).unwrap();
        let (kind, listed) = hookline_envelope::HISTORY
            .iter()
            .find(|(_, j)| *j == json)
            .unwrap_or_else(|| panic!("{name} is not listed in HISTORY"));
        let fp = hookline_envelope::KnownSchema::parse(*kind, listed)
            .unwrap()
            .fingerprint();
        let le: String = fp
            .to_le_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert!(
            name.ends_with(&format!(".{le}.avsc")),
            "{name}: fingerprint {le}"
        );
        assert_ne!(
            registry.current(*kind).fingerprint(),
            fp,
            "{name} is current"
        );
        files += 1;
    }
    assert_eq!(files, hookline_envelope::HISTORY.len());
}

#[test]
fn canonical_form_follows_the_spec_for_logical_types() {
    let pcf = RecordKind::DomainEvent.current().canonical_form();
    assert!(
        pcf.contains(r#"{"name":"occurred_at","type":"long"}"#),
        "{pcf}"
    );
    assert!(!pcf.contains("logicalType"));
    assert!(!pcf.contains("doc"));
    assert!(pcf.starts_with(r#"{"name":"dev.hookline.v1.DomainEvent","type":"record""#));
}

#[test]
fn crc64_avro_matches_the_spec_vectors() {
    // From the Avro project's share/test/data/schema-tests.txt.
    let vectors: [(&str, i64); 4] = [
        (r#""null""#, 7195948357588979594),
        (r#""boolean""#, -6970731678124411036),
        (
            r#"{"name":"foo","type":"fixed","size":15}"#,
            1756455273707447556,
        ),
        (
            r#"{"name":"PigValue","type":"record","fields":[{"name":"value","type":["null","int","long","PigValue"]}]}"#,
            -1759257747318642341,
        ),
    ];
    for (pcf, want) in vectors {
        assert_eq!(crc64_avro(pcf.as_bytes()) as i64, want, "{pcf}");
    }
}

#[test]
fn every_schema_parses_and_fingerprints_are_distinct() {
    let registry = Registry::builtin().unwrap();
    let mut fps: Vec<u64> = registry.known().map(|k| k.fingerprint()).collect();
    fps.sort_unstable();
    fps.dedup();
    assert_eq!(
        fps.len(),
        RecordKind::ALL.len() + hookline_envelope::HISTORY.len()
    );
    for kind in RecordKind::ALL {
        assert_eq!(registry.current(kind).kind(), kind);
        assert_eq!(kind.to_string().parse::<RecordKind>().unwrap(), kind);
        assert_eq!(kind.full_name().parse::<RecordKind>().unwrap(), kind);
    }
    assert!("Nope".parse::<RecordKind>().is_err());
}

/// Every record and every field of every schema file has a non-empty `doc`.
#[test]
fn every_record_and_field_is_documented() {
    fn walk(v: &serde_json::Value, path: &str, missing: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(o) => {
                if o.get("type").and_then(|t| t.as_str()) == Some("record") {
                    let name = o["name"].as_str().unwrap_or("?");
                    let here = format!("{path}/{name}");
                    if o.get("doc")
                        .and_then(|d| d.as_str())
                        .is_none_or(str::is_empty)
                    {
                        missing.push(here.clone());
                    }
                    for f in o["fields"].as_array().into_iter().flatten() {
                        let fname = format!("{here}.{}", f["name"].as_str().unwrap_or("?"));
                        if f.get("doc")
                            .and_then(|d| d.as_str())
                            .is_none_or(str::is_empty)
                        {
                            missing.push(fname.clone());
                        }
                        walk(&f["type"], &fname, missing);
                    }
                } else {
                    o.values().for_each(|x| walk(x, path, missing));
                }
            }
            serde_json::Value::Array(a) => a.iter().for_each(|x| walk(x, path, missing)),
            _ => {}
        }
    }
    let mut missing = Vec::new();
    for kind in RecordKind::ALL {
        let json: serde_json::Value = serde_json::from_str(kind.current_source()).unwrap();
        walk(&json, kind.name(), &mut missing);
    }
    assert!(missing.is_empty(), "undocumented: {missing:?}");
}

/// DeadLetter inlines Delivery so its file parses alone; the copy must stay identical.
#[test]
fn dead_letter_inlines_the_current_delivery() {
    let dead: serde_json::Value =
        serde_json::from_str(RecordKind::DeadLetter.current_source()).unwrap();
    let delivery: serde_json::Value =
        serde_json::from_str(RecordKind::Delivery.current_source()).unwrap();
    let inlined = dead["fields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "delivery")
        .unwrap();
    assert_eq!(
        inlined["type"], delivery,
        "copy schemas/delivery.avsc into dead_letter.avsc"
    );
}

/// AttemptRecord inlines ReplayOf (from Delivery) so its file parses alone; the copy must
/// stay identical.
#[test]
fn attempt_record_inlines_the_current_replay_of() {
    let field = |kind: RecordKind, name: &str| {
        let json: serde_json::Value = serde_json::from_str(kind.current_source()).unwrap();
        json["fields"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == name)
            .unwrap()["type"]
            .clone()
    };
    assert_eq!(
        field(RecordKind::AttemptRecord, "replay_of"),
        field(RecordKind::Delivery, "replay_of"),
        "copy Delivery.replay_of of schemas/delivery.avsc into attempt_record.avsc"
    );
}

/// Every optional field is a union with null first and default null, so it can be added to
/// an existing record and any Avro library fills it in.
#[test]
fn optional_fields_are_null_first_with_null_default() {
    for kind in RecordKind::ALL {
        let json: serde_json::Value = serde_json::from_str(kind.current_source()).unwrap();
        let mut stack = vec![json];
        while let Some(v) = stack.pop() {
            if let Some(fields) = v.get("fields").and_then(|f| f.as_array()) {
                for f in fields {
                    if let Some(branches) = f["type"].as_array() {
                        assert_eq!(branches[0], "null", "{kind}.{}", f["name"]);
                        assert_eq!(
                            f.get("default"),
                            Some(&serde_json::Value::Null),
                            "{kind}.{}",
                            f["name"]
                        );
                    }
                    stack.push(f["type"].clone());
                    if let Some(branches) = f["type"].as_array() {
                        stack.extend(branches.iter().cloned());
                    }
                    if let Some(items) = f["type"].get("items") {
                        stack.push(items.clone());
                    }
                }
            }
        }
    }
}
