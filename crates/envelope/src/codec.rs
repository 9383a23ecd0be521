//! Avro single-object encoding: `C3 01`, the writer schema's 8-byte little-endian CRC-64-AVRO
//! fingerprint, then the binary datum. Any Avro library can produce and read these bytes
//! from `schemas/*.avsc` alone, without a schema registry service.
//!
//! Guarantees: [`encode`] is deterministic (maps are sorted) and always writes the current
//! schema. [`decode`] never panics and never allocates more than a small multiple of its
//! input, whatever the bytes; it accepts exactly one datum written with a known version of
//! the expected record's schema, resolved to the reader's schema, and says precisely what
//! was wrong otherwise.

use std::{collections::HashMap, sync::LazyLock};

use apache_avro::{
    from_value, reader::datum::GenericDatumReader, writer::datum::GenericDatumWriter, AvroResult,
};

use crate::{
    guard,
    records::{QuarantineReason, Record},
    schema::{KnownSchema, RecordKind, Registry},
};
pub use crate::{
    guard::DatumError,
    header::{fingerprint_of, HEADER_LEN, MAGIC},
};

/// Why bytes did not decode as the expected record.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// Fewer bytes than the 10-byte header (this includes empty input).
    #[error("{len} bytes is shorter than the 10-byte single-object header")]
    TooShort {
        /// How many bytes there were.
        len: usize,
    },
    /// The first two bytes are not `C3 01`: not single-object Avro.
    #[error("bad single-object magic {:02x} {:02x}, expected c3 01", found[0], found[1])]
    BadMagic {
        /// The two bytes found.
        found: [u8; 2],
    },
    /// No known writer schema has this fingerprint.
    #[error("unknown writer schema fingerprint {fingerprint:016x}")]
    UnknownFingerprint {
        /// The fingerprint, as the little-endian u64 of the header's bytes 2..10.
        fingerprint: u64,
    },
    /// The writer schema is known, but belongs to another record.
    #[error("expected a {expected}, found a {found}")]
    WrongRecord {
        /// The record the caller asked for.
        expected: RecordKind,
        /// The record the bytes were written as.
        found: RecordKind,
    },
    /// The datum is malformed for its writer schema, or cannot be resolved.
    #[error("malformed {record} datum")]
    BadDatum {
        /// The record being decoded.
        record: RecordKind,
        /// What was wrong.
        #[source]
        source: DatumError,
    },
    /// A whole datum was read and bytes were left over.
    #[error("{count} bytes left over after the {record} datum")]
    TrailingBytes {
        /// The record being decoded.
        record: RecordKind,
        /// How many bytes were left.
        count: usize,
    },
}

impl DecodeError {
    /// The quarantine reason this error files a record under.
    pub fn quarantine_reason(&self) -> QuarantineReason {
        match self {
            Self::TooShort { .. } | Self::BadMagic { .. } => QuarantineReason::NotAvro,
            Self::UnknownFingerprint { .. } => QuarantineReason::UnknownFingerprint,
            Self::WrongRecord { .. } => QuarantineReason::WrongRecord,
            Self::BadDatum { .. } | Self::TrailingBytes { .. } => QuarantineReason::BadDatum,
        }
    }
}

/// Encodes `record` with its current schema as single-object Avro.
///
/// # Panics
/// Only if a record type disagrees with its own schema, a bug the round-trip tests rule out.
pub fn encode<T: Record>(record: &T) -> Vec<u8> {
    let known = T::schema();
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(&known.header());
    let written = match compiled(known) {
        Some(c) => c.writer.write_ser(&mut out, record),
        None => GenericDatumWriter::builder(known.schema())
            .build()
            .and_then(|w| w.write_ser(&mut out, record)),
    };
    if let Err(e) = written {
        panic!("{} does not match its own schema: {e}", T::KIND);
    }
    out
}

/// A schema's reader and writer with its names resolved once, so that a record is read
/// straight into its Rust type (no `Value` in between) and written without resolving names
/// per call.
struct Compiled {
    reader: GenericDatumReader<'static>,
    writer: GenericDatumWriter<'static>,
}

/// [`Compiled`] for every schema of the global registry, by fingerprint.
static COMPILED: LazyLock<HashMap<u64, Compiled>> = LazyLock::new(|| {
    Registry::global()
        .known()
        .map(|known| {
            let compile = || -> AvroResult<Compiled> {
                Ok(Compiled {
                    reader: GenericDatumReader::builder(known.schema()).build()?,
                    writer: GenericDatumWriter::builder(known.schema()).build()?,
                })
            };
            match compile() {
                Ok(c) => (known.fingerprint(), c),
                // Unreachable: the registry parsed and checked every schema it holds.
                Err(e) => panic!("{} schema {:016x}: {e}", known.kind(), known.fingerprint()),
            }
        })
        .collect()
});

/// The compiled reader and writer of `schema`, if the global registry knows it (a schema is
/// its fingerprint: equal fingerprints are equal canonical forms).
fn compiled(schema: &KnownSchema) -> Option<&'static Compiled> {
    COMPILED.get(&schema.fingerprint())
}

/// Decodes single-object `bytes` as `T`, accepting every writer version in
/// [`Registry::global`]. Never panics.
pub fn decode<T: Record>(bytes: &[u8]) -> Result<T, DecodeError> {
    Registry::global().decode(bytes)
}

/// The record single-object `bytes` were written as, if their fingerprint is known.
pub fn kind_of(bytes: &[u8]) -> Option<RecordKind> {
    Registry::global().kind_of(bytes)
}

impl Registry {
    /// Decodes single-object `bytes` into `T`, resolving from any known writer version of
    /// `T`'s record to `T`'s schema. Never panics, whatever the bytes.
    ///
    /// Lives here rather than in `schema` so that the schemas never depend on the codec.
    pub fn decode<T: Record>(&self, bytes: &[u8]) -> Result<T, DecodeError> {
        self.decode_with(bytes, true)
    }

    /// [`Registry::decode`] without the direct path: every datum goes through apache-avro's
    /// `Value`, as one written with an older schema does. The reference the fuzz tests hold
    /// the direct path to; slower, never needed otherwise.
    #[doc(hidden)]
    pub fn decode_by_value<T: Record>(&self, bytes: &[u8]) -> Result<T, DecodeError> {
        self.decode_with(bytes, false)
    }

    fn decode_with<T: Record>(&self, bytes: &[u8], direct: bool) -> Result<T, DecodeError> {
        if bytes.len() < HEADER_LEN {
            return Err(DecodeError::TooShort { len: bytes.len() });
        }
        let fingerprint = fingerprint_of(bytes).ok_or(DecodeError::BadMagic {
            found: [bytes[0], bytes[1]],
        })?;
        let writer = self
            .lookup(fingerprint)
            .ok_or(DecodeError::UnknownFingerprint { fingerprint })?;
        if writer.kind() != T::KIND {
            return Err(DecodeError::WrongRecord {
                expected: T::KIND,
                found: writer.kind(),
            });
        }
        let record = T::KIND;
        let bad = |source: DatumError| DecodeError::BadDatum { record, source };

        let datum = &bytes[HEADER_LEN..];
        let used = guard::scan(writer.schema(), datum).map_err(bad)?;
        if used != datum.len() {
            return Err(DecodeError::TrailingBytes {
                record,
                count: datum.len() - used,
            });
        }

        let reader = T::schema();
        if direct && reader.fingerprint() == writer.fingerprint() {
            return decode_direct(reader, datum).map_err(bad);
        }
        decode_by_value(writer, reader, datum).map_err(bad)
    }
}

/// Reads a datum written with the reader's own schema straight into `T`: no intermediate
/// `Value`, no field-name strings per record. The common case by far: every record a
/// current writer produced.
fn decode_direct<T: Record>(schema: &KnownSchema, mut datum: &[u8]) -> Result<T, DatumError> {
    let read = match compiled(schema) {
        Some(c) => c.reader.read_deser::<T>(&mut datum),
        None => GenericDatumReader::builder(schema.schema())
            .build()
            .and_then(|r| r.read_deser::<T>(&mut datum)),
    };
    Ok(read?)
}

/// Reads a datum through apache-avro's `Value`, resolved from `writer`'s schema to
/// `reader`'s by Avro's rules (defaults for fields added since), then converts it to `T`.
fn decode_by_value<T: Record>(
    writer: &KnownSchema,
    reader: &KnownSchema,
    mut datum: &[u8],
) -> Result<T, DatumError> {
    let resolve_to = (reader.fingerprint() != writer.fingerprint()).then(|| reader.schema());
    let value = GenericDatumReader::builder(writer.schema())
        .maybe_reader_schema(resolve_to)
        .build()?
        .read_value(&mut datum)?;
    Ok(from_value::<T>(&value)?)
}
