//! A pre-scan of an Avro binary datum against its writer schema, before apache-avro decodes it.
//!
//! Guarantees: it reads only the given slice, allocates nothing, and proves that every length
//! and item count fits in the bytes that remain and every union or enum index is in range.
//! apache-avro trusts a declared count when it reserves memory, so without this a few garbage
//! bytes could ask for gigabytes and abort the process. Work is linear in the input size.

use apache_avro::Schema;

/// What is wrong inside a datum. Offsets count from the start of the datum (after the header).
#[derive(Debug, thiserror::Error)]
pub enum DatumError {
    /// The datum ends in the middle of a value.
    #[error("datum ends early at byte {at}")]
    Truncated {
        /// Where more bytes were needed.
        at: usize,
    },
    /// A varint longer than 10 bytes or beyond 64 bits.
    #[error("varint at byte {at} overflows 64 bits")]
    VarintOverflow {
        /// Where the varint starts.
        at: usize,
    },
    /// A length or count that is negative or larger than the bytes that remain.
    #[error("length {declared} at byte {at} does not fit the {remaining} bytes left")]
    BadLength {
        /// Where the length starts.
        at: usize,
        /// The length declared.
        declared: i64,
        /// Bytes left after it.
        remaining: usize,
    },
    /// A union branch or enum symbol index out of range.
    #[error("index {index} at byte {at} is out of range 0..{len}")]
    BadIndex {
        /// Where the index starts.
        at: usize,
        /// The index declared.
        index: i64,
        /// How many branches or symbols there are.
        len: usize,
    },
    /// The writer schema has a construct the pre-scan cannot walk (schemas are checked when
    /// they are registered, so this is not expected).
    #[error("writer schema is not supported by the pre-scan")]
    UnsupportedSchema,
    /// apache-avro rejected the datum, its resolution, or its conversion to the Rust type.
    #[error(transparent)]
    Avro(#[from] apache_avro::Error),
}

/// Checks that `schema` uses only what [`scan`] understands: primitives, the int/long
/// logical types, records, enums, fixed, arrays, maps and unions, with no named references
/// (a schema file inlines every named type) and no array items that encode in zero bytes.
pub(crate) fn check_supported(schema: &Schema) -> Result<(), String> {
    match schema {
        Schema::Null
        | Schema::Boolean
        | Schema::Int
        | Schema::Long
        | Schema::Float
        | Schema::Double
        | Schema::Bytes
        | Schema::String
        | Schema::Date
        | Schema::TimeMillis
        | Schema::TimeMicros
        | Schema::TimestampMillis
        | Schema::TimestampMicros
        | Schema::TimestampNanos
        | Schema::LocalTimestampMillis
        | Schema::LocalTimestampMicros
        | Schema::LocalTimestampNanos
        | Schema::Enum(_)
        | Schema::Fixed(_) => Ok(()),
        Schema::Array(a) => {
            if min_size(&a.items) == 0 {
                return Err("array items that can encode in zero bytes".to_owned());
            }
            check_supported(&a.items)
        }
        Schema::Map(m) => check_supported(&m.types),
        Schema::Union(u) => u.variants().iter().try_for_each(check_supported),
        Schema::Record(r) => r.fields.iter().try_for_each(|f| {
            check_supported(&f.schema).map_err(|e| format!("field `{}`: {e}", f.name))
        }),
        Schema::Ref { name } => Err(format!(
            "reference to named type `{}` (inline it)",
            name.fullname(None)
        )),
        other => Err(format!(
            "type {:?}",
            apache_avro::schema::SchemaKind::from(other)
        )),
    }
}

/// The fewest bytes a datum of `schema` can take.
fn min_size(schema: &Schema) -> usize {
    match schema {
        Schema::Null => 0,
        Schema::Fixed(f) => f.size,
        Schema::Record(r) => r.fields.iter().map(|f| min_size(&f.schema)).sum(),
        _ => 1,
    }
}

/// Walks one datum of `schema` at the start of `input`; returns the bytes it takes.
/// `schema` must have passed [`check_supported`].
pub(crate) fn scan(schema: &Schema, input: &[u8]) -> Result<usize, DatumError> {
    let mut cursor = Cursor { input, pos: 0 };
    cursor.walk(schema)?;
    Ok(cursor.pos)
}

struct Cursor<'a> {
    input: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    fn remaining(&self) -> usize {
        self.input.len() - self.pos
    }

    fn skip(&mut self, n: usize) -> Result<(), DatumError> {
        if n > self.remaining() {
            return Err(DatumError::Truncated { at: self.pos });
        }
        self.pos += n;
        Ok(())
    }

    /// A zig-zag varint, as Avro encodes int and long.
    fn varint(&mut self) -> Result<i64, DatumError> {
        let start = self.pos;
        let mut raw: u64 = 0;
        for shift in (0..70).step_by(7) {
            let Some(&b) = self.input.get(self.pos) else {
                return Err(DatumError::Truncated { at: self.pos });
            };
            self.pos += 1;
            if shift == 63 && b > 1 {
                return Err(DatumError::VarintOverflow { at: start });
            }
            raw |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(((raw >> 1) as i64) ^ -((raw & 1) as i64));
            }
        }
        Err(DatumError::VarintOverflow { at: start })
    }

    /// A length or count that must be non-negative and fit in what remains (each counted
    /// unit takes at least one byte).
    fn length(&mut self) -> Result<usize, DatumError> {
        let at = self.pos;
        let declared = self.varint()?;
        match usize::try_from(declared) {
            Ok(n) if n <= self.remaining() => Ok(n),
            _ => Err(DatumError::BadLength {
                at,
                declared,
                remaining: self.remaining(),
            }),
        }
    }

    /// One block header of an array or map: the item count, 0 at the end.
    fn block_count(&mut self) -> Result<usize, DatumError> {
        let at = self.pos;
        let declared = self.varint()?;
        if declared >= 0 {
            self.pos = at;
            return self.length();
        }
        // A negative count is followed by the block's size in bytes.
        let count = declared.checked_neg().and_then(|n| usize::try_from(n).ok());
        self.length()?;
        match count {
            Some(n) if n <= self.remaining() => Ok(n),
            _ => Err(DatumError::BadLength {
                at,
                declared,
                remaining: self.remaining(),
            }),
        }
    }

    fn index(&mut self, len: usize) -> Result<usize, DatumError> {
        let at = self.pos;
        let index = self.varint()?;
        match usize::try_from(index) {
            Ok(i) if i < len => Ok(i),
            _ => Err(DatumError::BadIndex { at, index, len }),
        }
    }

    fn walk(&mut self, schema: &Schema) -> Result<(), DatumError> {
        match schema {
            Schema::Null => Ok(()),
            Schema::Boolean => self.skip(1),
            Schema::Int
            | Schema::Long
            | Schema::Date
            | Schema::TimeMillis
            | Schema::TimeMicros
            | Schema::TimestampMillis
            | Schema::TimestampMicros
            | Schema::TimestampNanos
            | Schema::LocalTimestampMillis
            | Schema::LocalTimestampMicros
            | Schema::LocalTimestampNanos => self.varint().map(drop),
            Schema::Float => self.skip(4),
            Schema::Double => self.skip(8),
            Schema::Bytes | Schema::String => {
                let n = self.length()?;
                self.skip(n)
            }
            Schema::Fixed(f) => self.skip(f.size),
            Schema::Enum(e) => self.index(e.symbols.len()).map(drop),
            Schema::Union(u) => {
                let variants = u.variants();
                let i = self.index(variants.len())?;
                self.walk(&variants[i])
            }
            Schema::Record(r) => r.fields.iter().try_for_each(|f| self.walk(&f.schema)),
            Schema::Array(a) => loop {
                let count = self.block_count()?;
                if count == 0 {
                    return Ok(());
                }
                for _ in 0..count {
                    self.walk(&a.items)?;
                }
            },
            Schema::Map(m) => loop {
                let count = self.block_count()?;
                if count == 0 {
                    return Ok(());
                }
                for _ in 0..count {
                    let key_len = self.length()?;
                    self.skip(key_len)?;
                    self.walk(&m.types)?;
                }
            },
            _ => Err(DatumError::UnsupportedSchema),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn long_schema() -> Schema {
        Schema::Long
    }

    #[test]
    fn varint_decodes_zigzag_extremes() {
        // i64::MIN zig-zags to u64::MAX: ten bytes, the last one 0x01.
        let mut bytes = vec![0xff; 9];
        bytes.push(0x01);
        assert_eq!(scan(&long_schema(), &bytes).unwrap(), 10);
        let mut c = Cursor {
            input: &bytes,
            pos: 0,
        };
        assert_eq!(c.varint().unwrap(), i64::MIN);
    }

    #[test]
    fn varint_rejects_overlong_encodings() {
        let bytes = [0xff; 11];
        assert!(matches!(
            scan(&long_schema(), &bytes),
            Err(DatumError::VarintOverflow { at: 0 })
        ));
        let mut ten = vec![0xff; 9];
        ten.push(0x02);
        assert!(matches!(
            scan(&long_schema(), &ten),
            Err(DatumError::VarintOverflow { at: 0 })
        ));
    }

    #[test]
    fn huge_declared_lengths_are_refused_before_allocation() {
        let array = Schema::parse_str(r#"{"type":"array","items":"string"}"#).unwrap();
        // count = 2^40 (zig-zag 2^41), followed by nothing.
        let bytes = [0x80, 0x80, 0x80, 0x80, 0x80, 0x40];
        assert!(matches!(
            scan(&array, &bytes),
            Err(DatumError::BadLength { at: 0, .. })
        ));
        assert!(matches!(
            scan(&Schema::Bytes, &[0x01]),
            Err(DatumError::BadLength { declared: -1, .. })
        ));
    }

    #[test]
    fn negative_block_counts_with_byte_sizes_are_accepted() {
        let map = Schema::parse_str(r#"{"type":"map","values":"string"}"#).unwrap();
        // count -1 (zig-zag 1), block size 4 (zig-zag 8), "a" => "b", end of map.
        let bytes = [0x01, 0x08, 0x02, b'a', 0x02, b'b', 0x00];
        assert_eq!(scan(&map, &bytes).unwrap(), bytes.len());
        let value = apache_avro::reader::datum::GenericDatumReader::builder(&map)
            .build()
            .and_then(|r| r.read_value(&mut &bytes[..]))
            .unwrap();
        assert!(matches!(value, apache_avro::types::Value::Map(m) if m.len() == 1));
    }

    #[test]
    fn zero_size_array_items_and_refs_are_unsupported() {
        let nulls = Schema::parse_str(r#"{"type":"array","items":"null"}"#).unwrap();
        assert!(check_supported(&nulls).is_err());
        let uuid = Schema::parse_str(r#"{"type":"string","logicalType":"uuid"}"#).unwrap();
        assert!(check_supported(&uuid).is_err());
    }
}
