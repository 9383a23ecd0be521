//! The contract's Avro schemas, parsed once, and the registry of known writer schemas.
//!
//! Guarantees: the schemas compiled in are exactly `schemas/*.avsc`; a fingerprint is the
//! spec's CRC-64-AVRO (Rabin) of the Parsing Canonical Form, as every Avro library computes it;
//! a writer schema is registered only if the current reader schema of its record can resolve
//! it, so anything the registry accepts decodes into the current Rust type.
//!
//! Evolution rule: fields are only added, and only with a default. A reader learns a new
//! writer version by listing it in [`HISTORY`] (readers are released first, writers switch
//! afterwards); single-object encoding carries no schema, so bytes from an unlisted version
//! are rejected as an unknown fingerprint, never guessed at.

use std::{collections::HashMap, fmt, str::FromStr, sync::LazyLock};

use apache_avro::{error::CompatibilityError, schema_compatibility::SchemaCompatibility, Schema};

use crate::{guard, header};

/// The Avro namespace of every contract record.
pub const NAMESPACE: &str = "dev.hookline.v1";

/// The record types of the contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RecordKind {
    /// `dev.hookline.v1.DomainEvent`
    DomainEvent,
    /// `dev.hookline.v1.Subscription`
    Subscription,
    /// `dev.hookline.v1.Delivery`
    Delivery,
    /// `dev.hookline.v1.DeadLetter`
    DeadLetter,
    /// `dev.hookline.v1.QuarantinedEvent`
    QuarantinedEvent,
    /// `dev.hookline.v1.AttemptRecord`
    AttemptRecord,
    /// `dev.hookline.v1.EndpointHealth`
    EndpointHealth,
}

impl RecordKind {
    /// Every record kind, in declaration order.
    pub const ALL: [RecordKind; 7] = [
        Self::DomainEvent,
        Self::Subscription,
        Self::Delivery,
        Self::DeadLetter,
        Self::QuarantinedEvent,
        Self::AttemptRecord,
        Self::EndpointHealth,
    ];

    /// The record's simple name, e.g. `DomainEvent`.
    pub fn name(self) -> &'static str {
        match self {
            Self::DomainEvent => "DomainEvent",
            Self::Subscription => "Subscription",
            Self::Delivery => "Delivery",
            Self::DeadLetter => "DeadLetter",
            Self::QuarantinedEvent => "QuarantinedEvent",
            Self::AttemptRecord => "AttemptRecord",
            Self::EndpointHealth => "EndpointHealth",
        }
    }

    /// The record's full Avro name, e.g. `dev.hookline.v1.DomainEvent`.
    pub fn full_name(self) -> String {
        format!("{NAMESPACE}.{}", self.name())
    }

    /// The current schema source (`schemas/<file>.avsc`), compiled in.
    pub fn current_source(self) -> &'static str {
        match self {
            Self::DomainEvent => include_str!("../../../schemas/domain_event.avsc"),
            Self::Subscription => include_str!("../../../schemas/subscription.avsc"),
            Self::Delivery => include_str!("../../../schemas/delivery.avsc"),
            Self::DeadLetter => include_str!("../../../schemas/dead_letter.avsc"),
            Self::QuarantinedEvent => include_str!("../../../schemas/quarantined_event.avsc"),
            Self::AttemptRecord => include_str!("../../../schemas/attempt_record.avsc"),
            Self::EndpointHealth => include_str!("../../../schemas/endpoint_health.avsc"),
        }
    }

    /// The current schema of this record, from the global registry.
    pub fn current(self) -> &'static KnownSchema {
        Registry::global().current(self)
    }
}

impl fmt::Display for RecordKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for RecordKind {
    type Err = SchemaError;

    /// Accepts the simple name (`Delivery`) or the full name (`dev.hookline.v1.Delivery`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let simple = s
            .strip_prefix(NAMESPACE)
            .and_then(|rest| rest.strip_prefix('.'))
            .unwrap_or(s);
        Self::ALL
            .into_iter()
            .find(|k| k.name() == simple)
            .ok_or_else(|| SchemaError::UnknownRecord { name: s.to_owned() })
    }
}

/// Older (or pre-released newer) writer schemas that readers must still accept, per record.
/// Keep each as its own file under `schemas/history/` (named `<file>.<fingerprint>.avsc`)
/// and list it here.
pub const HISTORY: &[(RecordKind, &str)] = &[
    (
        RecordKind::Subscription,
        include_str!("../../../schemas/history/subscription.c414c01201dce6fd.avsc"),
    ),
    (
        RecordKind::Subscription,
        include_str!("../../../schemas/history/subscription.2ba1d50a70dce31c.avsc"),
    ),
    (
        RecordKind::Delivery,
        include_str!("../../../schemas/history/delivery.f38e23020519decc.avsc"),
    ),
    (
        RecordKind::DeadLetter,
        include_str!("../../../schemas/history/dead_letter.b6c7b91f57fc9066.avsc"),
    ),
    (
        RecordKind::AttemptRecord,
        include_str!("../../../schemas/history/attempt_record.ad9f8b89f2f8dfc3.avsc"),
    ),
];

/// Why a schema could not be loaded or registered.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    /// Not valid Avro schema JSON.
    #[error("{record}: schema does not parse")]
    Parse {
        /// The record the schema was meant for.
        record: RecordKind,
        /// The parser's complaint.
        #[source]
        source: apache_avro::Error,
    },
    /// The schema's top-level full name is not the record's.
    #[error("{record}: schema is named `{found}`, expected `{expected}`")]
    WrongName {
        /// The record the schema was meant for.
        record: RecordKind,
        /// The expected full name.
        expected: String,
        /// The name the schema has (empty if it is not a record).
        found: String,
    },
    /// The schema uses a construct the datum pre-scan does not support.
    #[error("{record}: unsupported schema construct: {what}")]
    Unsupported {
        /// The record the schema was meant for.
        record: RecordKind,
        /// What is unsupported, and where.
        what: String,
    },
    /// The current reader schema cannot resolve data written with this schema.
    #[error("{record}: the current reader cannot read this writer schema")]
    Incompatible {
        /// The record the schema was meant for.
        record: RecordKind,
        /// What resolution would fail on.
        #[source]
        source: CompatibilityError,
    },
    /// Two different schemas share a fingerprint (or one fingerprint names two records).
    #[error("fingerprint {fingerprint:016x} of {record} is already registered for {existing}")]
    FingerprintCollision {
        /// The record being registered.
        record: RecordKind,
        /// The record already holding the fingerprint.
        existing: RecordKind,
        /// The fingerprint.
        fingerprint: u64,
    },
    /// No record has this name.
    #[error("no contract record is named `{name}`")]
    UnknownRecord {
        /// The name asked for.
        name: String,
    },
}

/// A parsed schema with its canonical form and fingerprint, computed once.
#[derive(Debug)]
pub struct KnownSchema {
    kind: RecordKind,
    schema: Schema,
    canonical_form: String,
    fingerprint: u64,
}

impl KnownSchema {
    /// Parses `json` as a schema of `kind`: it must be that record (by full name) and use only
    /// constructs the decoder's pre-scan supports.
    pub fn parse(kind: RecordKind, json: &str) -> Result<Self, SchemaError> {
        let schema = Schema::parse_str(json).map_err(|source| SchemaError::Parse {
            record: kind,
            source,
        })?;
        let found = match &schema {
            Schema::Record(r) => r.name.fullname(None),
            _ => String::new(),
        };
        if found != kind.full_name() {
            return Err(SchemaError::WrongName {
                record: kind,
                expected: kind.full_name(),
                found,
            });
        }
        guard::check_supported(&schema)
            .map_err(|what| SchemaError::Unsupported { record: kind, what })?;
        let canonical_form = parsing_canonical_form(&schema);
        let fingerprint = crc64_avro(canonical_form.as_bytes());
        Ok(Self {
            kind,
            schema,
            canonical_form,
            fingerprint,
        })
    }

    /// The record this schema describes.
    pub fn kind(&self) -> RecordKind {
        self.kind
    }

    /// The parsed schema.
    pub fn schema(&self) -> &Schema {
        &self.schema
    }

    /// The Parsing Canonical Form the fingerprint is taken over.
    pub fn canonical_form(&self) -> &str {
        &self.canonical_form
    }

    /// [`crc64_avro`] of the canonical form; on the wire as its 8 little-endian bytes.
    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }

    /// The 10-byte single-object header: `C3 01` + fingerprint, little-endian.
    pub fn header(&self) -> [u8; header::HEADER_LEN] {
        header::header_for(self.fingerprint)
    }
}

/// The spec's Parsing Canonical Form of `schema`.
///
/// apache-avro 0.21 writes a logical type's underlying primitive as `{"type":"long"}` after
/// stripping `logicalType`; the spec's [PRIMITIVES] rule, Java's `SchemaNormalization` and
/// fastavro write `"long"`. Fingerprints must agree with every other Avro library, so the
/// leftover single-key objects are collapsed here. (Names and stripped attributes cannot
/// contain `{"type":`, so the replacement touches nothing else; it is a no-op once
/// apache-avro follows the spec.)
fn parsing_canonical_form(schema: &Schema) -> String {
    const PRIMITIVES: [&str; 8] = [
        "null", "boolean", "int", "long", "float", "double", "bytes", "string",
    ];
    let mut pcf = schema.canonical_form();
    for p in PRIMITIVES {
        pcf = pcf.replace(&format!(r#"{{"type":"{p}"}}"#), &format!(r#""{p}""#));
    }
    pcf
}

/// CRC-64-AVRO, the Rabin fingerprint of the Avro specification ("Schema Fingerprints").
pub fn crc64_avro(data: &[u8]) -> u64 {
    const EMPTY: u64 = 0xc15d_213a_a4d7_a795;
    const TABLE: [u64; 256] = {
        let mut table = [0u64; 256];
        let mut i = 0;
        while i < 256 {
            let mut fp = i as u64;
            let mut j = 0;
            while j < 8 {
                fp = (fp >> 1) ^ (EMPTY & (fp & 1).wrapping_neg());
                j += 1;
            }
            table[i] = fp;
            i += 1;
        }
        table
    };
    data.iter().fold(EMPTY, |fp, &b| {
        (fp >> 8) ^ TABLE[((fp ^ u64::from(b)) & 0xff) as usize]
    })
}

/// Known writer schemas by fingerprint, plus the current schema of every record.
#[derive(Debug)]
pub struct Registry {
    /// The current schema of each kind at index `kind as usize`, then registered versions.
    schemas: Vec<KnownSchema>,
    by_fingerprint: HashMap<u64, usize>,
}

static GLOBAL: LazyLock<Registry> = LazyLock::new(|| {
    Registry::builtin().expect("compiled-in schemas are valid (the crate's tests load them)")
});

impl Registry {
    /// The process-wide registry: the current schemas and [`HISTORY`].
    pub fn global() -> &'static Registry {
        &GLOBAL
    }

    /// A fresh registry with the current schemas and [`HISTORY`].
    pub fn builtin() -> Result<Self, SchemaError> {
        let mut schemas = Vec::with_capacity(RecordKind::ALL.len() + HISTORY.len());
        let mut by_fingerprint = HashMap::new();
        for kind in RecordKind::ALL {
            let known = KnownSchema::parse(kind, kind.current_source())?;
            if let Some(&i) = by_fingerprint.get(&known.fingerprint) {
                let existing: &KnownSchema = &schemas[i];
                return Err(SchemaError::FingerprintCollision {
                    record: kind,
                    existing: existing.kind,
                    fingerprint: known.fingerprint,
                });
            }
            by_fingerprint.insert(known.fingerprint, schemas.len());
            schemas.push(known);
        }
        let mut registry = Self {
            schemas,
            by_fingerprint,
        };
        for (kind, json) in HISTORY {
            registry.register(*kind, json)?;
        }
        Ok(registry)
    }

    /// Accepts `json` as another writer schema of `kind` and returns its fingerprint.
    /// Refused unless the current reader schema of `kind` can resolve it. Idempotent.
    pub fn register(&mut self, kind: RecordKind, json: &str) -> Result<u64, SchemaError> {
        let known = KnownSchema::parse(kind, json)?;
        if let Some(existing) = self.lookup(known.fingerprint) {
            if existing.kind != kind {
                return Err(SchemaError::FingerprintCollision {
                    record: kind,
                    existing: existing.kind,
                    fingerprint: known.fingerprint,
                });
            }
            return Ok(known.fingerprint);
        }
        SchemaCompatibility::can_read(&known.schema, &self.current(kind).schema).map_err(
            |source| SchemaError::Incompatible {
                record: kind,
                source,
            },
        )?;
        let fingerprint = known.fingerprint;
        self.by_fingerprint.insert(fingerprint, self.schemas.len());
        self.schemas.push(known);
        Ok(fingerprint)
    }

    /// The current schema of `kind`.
    pub fn current(&self, kind: RecordKind) -> &KnownSchema {
        &self.schemas[kind as usize]
    }

    /// The known writer schema with this fingerprint, if any.
    pub fn lookup(&self, fingerprint: u64) -> Option<&KnownSchema> {
        self.by_fingerprint
            .get(&fingerprint)
            .map(|&i| &self.schemas[i])
    }

    /// Every known writer schema: the current ones first.
    pub fn known(&self) -> impl Iterator<Item = &KnownSchema> {
        self.schemas.iter()
    }

    /// Which record single-object `bytes` claim to be, if their fingerprint is known here.
    pub fn kind_of(&self, bytes: &[u8]) -> Option<RecordKind> {
        header::fingerprint_of(bytes)
            .and_then(|fp| self.lookup(fp))
            .map(|k| k.kind)
    }
}
