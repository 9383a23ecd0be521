//! Avro single-object encoding: `C3 01`, the writer schema's 8-byte little-endian CRC-64-AVRO
//! fingerprint, then the binary datum. Any Avro library can produce and read these bytes
//! from `schemas/*.avsc` alone, without a schema registry service.
//!
//! Guarantees: [`encode`] is deterministic (maps are sorted) and always writes the current
//! schema. [`decode`] never panics and never allocates more than a small multiple of its
//! input, whatever the bytes; it accepts exactly one datum written with a known version of
//! the expected record's schema, resolved to the reader's schema, and says precisely what
//! was wrong otherwise.

use apache_avro::{from_avro_datum, from_value};

use crate::{
    guard,
    records::{QuarantineReason, Record},
    schema::{RecordKind, Registry},
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
    if let Err(e) = apache_avro::write_avro_datum_ref(known.schema(), record, &mut out) {
        panic!("{} does not match its own schema: {e}", T::KIND);
    }
    out
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
        let resolve_to = (reader.fingerprint() != writer.fingerprint()).then(|| reader.schema());
        let mut input = datum;
        let value = from_avro_datum(writer.schema(), &mut input, resolve_to)
            .map_err(|e| bad(DatumError::Avro(e)))?;
        from_value::<T>(&value).map_err(|e| bad(DatumError::Avro(e)))
    }
}
