//! Mutation fuzzing of the envelope decoder, run by `cargo test` (so `make test` runs it).
//!
//! Valid encodings of every record are mutated — bit flips, byte overwrites, truncations,
//! inserted, duplicated and removed spans, splices of two encodings, varint lengths, counts
//! and indexes rewritten to huge, negative or boundary values (also overlong), fingerprints
//! swapped for another record's, an older writer's or a random one — and mixed with plain
//! random bytes. Whatever the input, `decode` returns quickly without panicking or reserving
//! absurd memory, refuses with exactly the typed error the header dictates, and every value
//! it accepts re-encodes to a value that decodes to itself.
//!
//! `HOOKLINE_FUZZ_CASES` sets the number of generated inputs, `HOOKLINE_FUZZ_SEED` replays a
//! run. The summary is printed to stderr (`-- --nocapture` shows it when the test passes).

mod common;

use std::{
    cell::RefCell,
    collections::BTreeMap,
    fmt::Debug,
    sync::LazyLock,
    time::{Duration, Instant},
};

use apache_avro::Schema;
use common::*;
use hookline_envelope::{
    encode, fingerprint_of, AttemptRecord, DatumError, DeadLetter, DecodeError, Delivery,
    DomainEvent, EndpointHealth, KnownSchema, QuarantinedEvent, Record, RecordKind, Registry,
    Subscription, HEADER_LEN, MAGIC,
};
use proptest::{
    collection::vec,
    prelude::*,
    sample::{select, Index},
    test_runner::{Config, RngSeed, TestCaseError, TestRunner},
};

/// About 2 s in a debug build on a shared 2-core machine; raise it for a longer hunt.
const DEFAULT_CASES: u32 = 20_000;

/// Generous: a decode takes well under a millisecond; only a hang or a quadratic blow-up
/// could reach this.
const MAX_DECODE_TIME: Duration = Duration::from_secs(1);

/// apache-avro without the guard reserved tens of GiB for a 15-byte input; thread stacks and
/// malloc arenas of the test harness stay far below this.
const MAX_VM_GROWTH_KIB: u64 = 1 << 20;

/// The built-in schemas plus older and newer writers, so swapped fingerprints also exercise
/// schema resolution of mutated data.
static EVOLVED: LazyLock<Registry> = LazyLock::new(|| {
    let mut registry = Registry::builtin().expect("built-in schemas load");
    for (kind, json) in [
        (
            RecordKind::DomainEvent,
            include_str!("fixtures/domain_event_v0.avsc"),
        ),
        (
            RecordKind::DomainEvent,
            include_str!("fixtures/domain_event_v2.avsc"),
        ),
        (
            RecordKind::Delivery,
            include_str!("fixtures/delivery_v2.avsc"),
        ),
    ] {
        registry.register(kind, json).expect("fixture registers");
    }
    registry
});

/// The fingerprints only [`EVOLVED`] knows.
static EVOLVED_ONLY: LazyLock<Vec<u64>> = LazyLock::new(|| {
    EVOLVED
        .known()
        .map(|k| k.fingerprint())
        .filter(|&fp| Registry::global().lookup(fp).is_none())
        .collect()
});

// ---------------------------------------------------------------------------------------
// Run configuration (HOOKLINE_FUZZ_CASES / HOOKLINE_FUZZ_SEED, shared in hookline-fuzzing).

use hookline_fuzzing::{cases as fuzz_cases, seed as fuzz_seed};

fn runner(cases: u32, seed: u64) -> TestRunner {
    TestRunner::new(Config {
        cases,
        rng_seed: RngSeed::Fixed(seed),
        failure_persistence: None,
        ..Config::default()
    })
}

fn vm_peak_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("VmPeak:"))?;
    line.trim().trim_end_matches("kB").trim().parse().ok()
}

// ---------------------------------------------------------------------------------------
// Seeds: valid encodings, with the position and role of every varint in them.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// A string or bytes length.
    Length,
    /// An array or map block count.
    Count,
    /// A union branch or enum symbol index, of this many choices.
    Index(usize),
    Number,
}

#[derive(Debug, Clone, Copy)]
struct Site {
    /// From the start of the whole encoding.
    at: usize,
    len: usize,
    role: Role,
}

#[derive(Clone)]
struct Seed {
    kind: RecordKind,
    bytes: Vec<u8>,
    sites: Vec<Site>,
}

impl Debug for Seed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {:02x?}", self.kind, self.bytes)
    }
}

impl Seed {
    /// `bytes` must be a valid encoding written with `writer`.
    fn new(writer: &KnownSchema, bytes: Vec<u8>) -> Self {
        let mut walk = Walk {
            bytes: &bytes,
            pos: HEADER_LEN,
            sites: Vec::new(),
        };
        walk.value(writer.schema());
        assert_eq!(walk.pos, bytes.len(), "the walk covers the datum");
        let sites = walk.sites;
        Self {
            kind: writer.kind(),
            bytes,
            sites,
        }
    }

    fn current<T: Record>(record: &T) -> Self {
        Self::new(T::schema(), encode(record))
    }

    /// `record` as an older or newer release would have written it.
    fn written_by<T: Record>(record: &T, writer: &KnownSchema) -> Self {
        let value = apache_avro::to_value(record)
            .and_then(|v| v.resolve(writer.schema()))
            .expect("the record resolves to the other writer's schema");
        let mut bytes = writer.header().to_vec();
        let datum = apache_avro::writer::datum::GenericDatumWriter::builder(writer.schema())
            .build()
            .and_then(|w| w.write_value_to_vec(value))
            .expect("the datum is written");
        bytes.extend_from_slice(&datum);
        Self::new(writer, bytes)
    }
}

/// Walks a valid datum (written by `encode`) and records its varints.
struct Walk<'a> {
    bytes: &'a [u8],
    pos: usize,
    sites: Vec<Site>,
}

impl Walk<'_> {
    fn varint(&mut self, role: Role) -> i64 {
        let at = self.pos;
        let mut raw = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.bytes[self.pos];
            self.pos += 1;
            raw |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                break;
            }
        }
        let len = self.pos - at;
        self.sites.push(Site { at, len, role });
        ((raw >> 1) as i64) ^ -((raw & 1) as i64)
    }

    fn size(&mut self, role: Role) -> usize {
        usize::try_from(self.varint(role)).expect("encode writes non-negative sizes")
    }

    fn value(&mut self, schema: &Schema) {
        match schema {
            Schema::Null => {}
            Schema::Boolean => self.pos += 1,
            Schema::Float => self.pos += 4,
            Schema::Double => self.pos += 8,
            Schema::Fixed(f) => self.pos += f.size,
            Schema::Bytes | Schema::String => self.pos += self.size(Role::Length),
            Schema::Enum(e) => {
                self.varint(Role::Index(e.symbols.len()));
            }
            Schema::Union(u) => {
                let i = self.size(Role::Index(u.variants().len()));
                self.value(&u.variants()[i]);
            }
            Schema::Record(r) => r.fields.iter().for_each(|f| self.value(&f.schema)),
            Schema::Array(a) => {
                while let n @ 1.. = self.size(Role::Count) {
                    (0..n).for_each(|_| self.value(&a.items));
                }
            }
            Schema::Map(m) => {
                while let n @ 1.. = self.size(Role::Count) {
                    for _ in 0..n {
                        self.pos += self.size(Role::Length);
                        self.value(&m.types);
                    }
                }
            }
            _ => {
                self.varint(Role::Number);
            }
        }
    }
}

fn samples() -> Vec<Seed> {
    vec![
        Seed::current(&sample_event()),
        Seed::current(&sample_subscription()),
        Seed::current(&sample_delivery()),
        Seed::current(&sample_dead_letter()),
        Seed::current(&sample_quarantined()),
        Seed::current(&sample_attempt()),
    ]
}

/// The writers only [`EVOLVED`] knows, of `kind`.
fn other_writers(kind: RecordKind) -> Vec<&'static KnownSchema> {
    EVOLVED_ONLY
        .iter()
        .filter_map(|&fp| EVOLVED.lookup(fp))
        .filter(|k| k.kind() == kind)
        .collect()
}

/// Boxed, like the other composite strategies here: the unboxed value trees of this many
/// nested unions overflow a 2 MiB test thread stack in a debug build.
fn seed() -> BoxedStrategy<Seed> {
    prop_oneof![
        4 => select(samples()),
        2 => domain_event().prop_map(|r| Seed::current(&r)).boxed(),
        2 => subscription().prop_map(|r| Seed::current(&r)).boxed(),
        2 => delivery().prop_map(|r| Seed::current(&r)).boxed(),
        2 => dead_letter().prop_map(|r| Seed::current(&r)).boxed(),
        2 => quarantined_event().prop_map(|r| Seed::current(&r)).boxed(),
        2 => attempt_record().prop_map(|r| Seed::current(&r)).boxed(),
        1 => (domain_event(), select(other_writers(RecordKind::DomainEvent)))
            .prop_map(|(r, w)| Seed::written_by(&r, w))
            .boxed(),
        1 => (delivery(), select(other_writers(RecordKind::Delivery)))
            .prop_map(|(r, w)| Seed::written_by(&r, w))
            .boxed(),
    ]
    .boxed()
}

// ---------------------------------------------------------------------------------------
// Mutations.

#[derive(Debug, Clone, Copy)]
enum VarintValue {
    Fixed(i64),
    /// The number of bytes left after the varint, plus this.
    Remaining(i8),
}

#[derive(Debug, Clone, Copy)]
enum FpChoice {
    Current(RecordKind),
    Evolved(Index),
    Random(u64),
}

#[derive(Debug, Clone)]
enum Mutation {
    FlipBit(Index, u8),
    SetByte(Index, u8),
    Truncate(Index),
    Insert(Index, Vec<u8>),
    Duplicate {
        from: Index,
        len: usize,
        to: Index,
    },
    Remove {
        from: Index,
        len: usize,
    },
    Splice {
        other: Seed,
        keep: Index,
        from: Index,
    },
    /// Rewrites one varint of the seed, padded with `pad` redundant continuation groups.
    Varint {
        site: Index,
        value: VarintValue,
        pad: usize,
    },
    Fingerprint(FpChoice),
}

impl Mutation {
    fn name(&self) -> &'static str {
        match self {
            Self::FlipBit(..) => "flip_bit",
            Self::SetByte(..) => "set_byte",
            Self::Truncate(..) => "truncate",
            Self::Insert(..) => "insert",
            Self::Duplicate { .. } => "duplicate",
            Self::Remove { .. } => "remove",
            Self::Splice { .. } => "splice",
            Self::Varint { .. } => "varint",
            Self::Fingerprint(..) => "fingerprint",
        }
    }
}

fn interesting_byte() -> impl Strategy<Value = u8> {
    prop_oneof![
        select(vec![0x00, 0x01, 0x02, 0x7f, 0x80, 0xfe, 0xff]),
        any::<u8>()
    ]
}

fn varint_value() -> impl Strategy<Value = VarintValue> {
    let edges = vec![
        i64::MIN,
        i64::MIN + 1,
        i64::MAX,
        -1,
        -2,
        i64::from(i32::MIN),
        i64::from(i32::MAX),
        1 << 31,
        1 << 32,
        1 << 40,
        1 << 53,
        1 << 62,
        400_000_000,
        0,
        1,
    ];
    prop_oneof![
        3 => select(edges).prop_map(VarintValue::Fixed),
        3 => (-2i8..=2).prop_map(VarintValue::Remaining),
        1 => (-3i64..300).prop_map(VarintValue::Fixed),
        1 => any::<i64>().prop_map(VarintValue::Fixed),
    ]
}

fn fp_choice() -> impl Strategy<Value = FpChoice> {
    prop_oneof![
        select(RecordKind::ALL.to_vec()).prop_map(FpChoice::Current),
        any::<Index>().prop_map(FpChoice::Evolved),
        any::<u64>().prop_map(FpChoice::Random),
    ]
}

fn varint_rewrite() -> impl Strategy<Value = Mutation> {
    let pad = prop_oneof![4 => Just(0usize), 1 => 1usize..=10];
    (any::<Index>(), varint_value(), pad).prop_map(|(site, value, pad)| Mutation::Varint {
        site,
        value,
        pad,
    })
}

fn mutation() -> BoxedStrategy<Mutation> {
    prop_oneof![
        3 => (any::<Index>(), 0u8..8).prop_map(|(at, bit)| Mutation::FlipBit(at, bit)),
        3 => (any::<Index>(), interesting_byte()).prop_map(|(at, b)| Mutation::SetByte(at, b)),
        2 => any::<Index>().prop_map(Mutation::Truncate),
        1 => (any::<Index>(), vec(interesting_byte(), 1..16))
            .prop_map(|(at, bytes)| Mutation::Insert(at, bytes)),
        1 => (any::<Index>(), 1usize..48, any::<Index>())
            .prop_map(|(from, len, to)| Mutation::Duplicate { from, len, to }),
        1 => (any::<Index>(), 1usize..32).prop_map(|(from, len)| Mutation::Remove { from, len }),
        1 => (seed(), any::<Index>(), any::<Index>())
            .prop_map(|(other, keep, from)| Mutation::Splice { other, keep, from }),
        4 => varint_rewrite(),
        1 => fp_choice().prop_map(Mutation::Fingerprint),
    ]
    .boxed()
}

fn zigzag(value: i64, pad: usize) -> Vec<u8> {
    let mut z = ((value << 1) ^ (value >> 63)) as u64;
    let mut out = Vec::with_capacity(10 + pad);
    loop {
        let low = (z & 0x7f) as u8;
        z >>= 7;
        if z == 0 {
            out.push(low);
            break;
        }
        out.push(low | 0x80);
    }
    for _ in 0..pad {
        if let Some(last) = out.last_mut() {
            *last |= 0x80;
        }
        out.push(0);
    }
    out
}

/// A varint rewrite whose outcome the guard must predict exactly: what the error must be.
#[derive(Debug)]
struct Expected {
    at: usize,
    value: i64,
    role: Role,
}

/// Applies `mutations` to the seed; varint rewrites first (their sites are the seed's),
/// from the last position back so earlier sites stay valid.
fn mutate(seed: &Seed, mutations: &[Mutation]) -> (Vec<u8>, Option<Expected>) {
    let mut bytes = seed.bytes.clone();
    let mut varints: Vec<(Site, VarintValue, usize)> = mutations
        .iter()
        .filter_map(|m| match m {
            Mutation::Varint { site, value, pad } => {
                Some((seed.sites[site.index(seed.sites.len())], *value, *pad))
            }
            _ => None,
        })
        .collect();
    varints.sort_by_key(|(site, ..)| std::cmp::Reverse(site.at));
    varints.dedup_by_key(|(site, ..)| site.at);
    let mut expected = None;
    for (site, value, pad) in &varints {
        let remaining = bytes.len() - site.at - site.len;
        let value = match *value {
            VarintValue::Fixed(v) => v,
            VarintValue::Remaining(delta) => remaining as i64 + i64::from(delta),
        };
        let encoded = zigzag(value, *pad);
        let fits = encoded.len() <= 10;
        bytes.splice(site.at..site.at + site.len, encoded);
        // Out of range for its role, behind an untouched prefix: the guard must stop here.
        let out_of_range = match site.role {
            Role::Length => value < 0 || value as u64 > remaining as u64,
            Role::Count => value as u64 > remaining as u64 && value > 0,
            Role::Index(n) => value < 0 || value as u64 >= n as u64,
            Role::Number => false,
        };
        if mutations.len() == 1 && fits && out_of_range {
            expected = Some(Expected {
                at: site.at - HEADER_LEN,
                value,
                role: site.role,
            });
        }
    }
    for m in mutations {
        let len = bytes.len();
        match m {
            Mutation::FlipBit(at, bit) if len > 0 => bytes[at.index(len)] ^= 1 << bit,
            Mutation::SetByte(at, b) if len > 0 => bytes[at.index(len)] = *b,
            Mutation::Truncate(at) => bytes.truncate(at.index(len + 1)),
            Mutation::Insert(at, ins) => {
                let at = at.index(len + 1);
                bytes.splice(at..at, ins.iter().copied());
            }
            Mutation::Duplicate { from, len: n, to } if len > 0 => {
                let from = from.index(len);
                let span = bytes[from..(from + n).min(len)].to_vec();
                let to = to.index(len + 1);
                bytes.splice(to..to, span);
            }
            Mutation::Remove { from, len: n } if len > 0 => {
                let from = from.index(len);
                bytes.drain(from..(from + n).min(len));
            }
            Mutation::Splice { other, keep, from } => {
                bytes.truncate(keep.index(len + 1));
                let from = from.index(other.bytes.len() + 1);
                bytes.extend_from_slice(&other.bytes[from..]);
            }
            Mutation::Fingerprint(choice) if len >= HEADER_LEN => {
                let fp = match *choice {
                    FpChoice::Current(kind) => kind.current().fingerprint(),
                    FpChoice::Evolved(i) => EVOLVED_ONLY[i.index(EVOLVED_ONLY.len())],
                    FpChoice::Random(fp) => fp,
                };
                bytes[2..HEADER_LEN].copy_from_slice(&fp.to_le_bytes());
            }
            _ => {}
        }
    }
    (bytes, expected)
}

#[derive(Debug, Clone)]
enum Input {
    Mutated(Seed, Vec<Mutation>),
    Random(Vec<u8>),
    /// A valid header of this record followed by random bytes.
    RandomDatum(RecordKind, Vec<u8>),
}

fn input() -> BoxedStrategy<Input> {
    prop_oneof![
        7 => (seed(), vec(mutation(), 1..5)).prop_map(|(s, m)| Input::Mutated(s, m)),
        // Alone, a rewrite has an exactly predictable outcome (see `mutate`).
        1 => (seed(), varint_rewrite()).prop_map(|(s, m)| Input::Mutated(s, vec![m])),
        1 => vec(any::<u8>(), 0..300).prop_map(Input::Random),
        1 => (select(RecordKind::ALL.to_vec()), vec(any::<u8>(), 0..300))
            .prop_map(|(k, d)| Input::RandomDatum(k, d)),
    ]
    .boxed()
}

// ---------------------------------------------------------------------------------------
// The oracle.

#[derive(Default)]
struct Stats {
    inputs: u64,
    sources: BTreeMap<&'static str, u64>,
    mutations: BTreeMap<&'static str, u64>,
    results: BTreeMap<String, u64>,
    decoded: u64,
    decoded_not_byte_identical: u64,
    compared: u64,
    exact_varint_checks: u64,
    other_writer: u64,
    other_writer_decoded: u64,
    max_time: Duration,
    max_time_len: usize,
}

impl Stats {
    fn summary(&self, what: &str, seed: Option<u64>, took: Duration, vm_growth: &str) -> String {
        let join = |m: &BTreeMap<&str, u64>| {
            m.iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut results: Vec<_> = self.results.iter().collect();
        results.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let results = results
            .iter()
            .map(|(k, v)| format!("{v} {k}"))
            .collect::<Vec<_>>()
            .join(", ");
        let seed = seed.map_or(String::new(), |s| format!(", HOOKLINE_FUZZ_SEED={s}"));
        let mut out = format!(
            "fuzz envelope decode ({what}): {} inputs in {took:.1?}{seed}\n",
            self.inputs
        );
        if !self.sources.is_empty() {
            out += &format!("  sources: {}\n", join(&self.sources));
            out += &format!("  mutations applied: {}\n", join(&self.mutations));
        }
        out += &format!("  results (as the record its header names): {results}\n");
        out += &format!(
            "  {} decoded, all re-encode to identical values ({} of them not byte-identical to \
             their input: non-canonical varints or blocks, repeated map keys, or an older writer)\n",
            self.decoded, self.decoded_not_byte_identical
        );
        out += &format!(
            "  {} inputs named the current schema: read directly into the Rust type and \
             through apache-avro's Value, the two agreed on every one\n",
            self.compared
        );
        if !self.sources.is_empty() {
            out += &format!(
                "  {} single out-of-range length/count/index rewrites, each refused at the \
                 rewritten offset with the declared value\n",
                self.exact_varint_checks
            );
            out += &format!(
                "  {} inputs named an older or newer writer schema (resolved to the current \
                 reader), {} of them decoded\n",
                self.other_writer, self.other_writer_decoded
            );
        }
        out += &format!(
            "  max time to decode one input as all 5 records: {:.2?} ({}-byte input); VmPeak \
             growth {vm_growth}",
            self.max_time, self.max_time_len
        );
        out
    }
}

fn label(e: &DecodeError) -> String {
    match e {
        DecodeError::TooShort { .. } => "TooShort".into(),
        DecodeError::BadMagic { .. } => "BadMagic".into(),
        DecodeError::UnknownFingerprint { .. } => "UnknownFingerprint".into(),
        DecodeError::WrongRecord { .. } => "WrongRecord".into(),
        DecodeError::TrailingBytes { .. } => "TrailingBytes".into(),
        DecodeError::BadDatum { source, .. } => match source {
            DatumError::Truncated { .. } => "BadDatum/Truncated".into(),
            DatumError::VarintOverflow { .. } => "BadDatum/VarintOverflow".into(),
            DatumError::BadLength { .. } => "BadDatum/BadLength".into(),
            DatumError::BadIndex { .. } => "BadDatum/BadIndex".into(),
            DatumError::UnsupportedSchema => "BadDatum/UnsupportedSchema".into(),
            // apache-avro's message up to its first detail, e.g. `Invalid utf-8 string`.
            DatumError::Avro(e) => {
                let message = e.to_string();
                let head = message.split(':').next().unwrap_or_default();
                format!("BadDatum/Avro({})", head.trim())
            }
        },
    }
}

/// What decoding `bytes` as `T` returned, checked against what the header dictates:
/// `Ok(Some(error))` for a correct error, `Ok(None)` for a value that re-encodes to itself.
fn check_as<T: Record + Debug>(
    registry: &Registry,
    bytes: &[u8],
    stats: &mut Stats,
) -> Result<Option<DecodeError>, TestCaseError> {
    let result = registry.decode::<T>(bytes);
    if fingerprint_of(bytes) == Some(T::schema().fingerprint()) {
        // Written with the reader's own schema: read straight into `T`, which must agree
        // with apache-avro's `Value` path on every input, value for value.
        let reference = registry.decode_by_value::<T>(bytes);
        match (&result, &reference) {
            (Ok(direct), Ok(by_value)) => {
                prop_assert_eq!(format!("{direct:?}"), format!("{by_value:?}"))
            }
            (Err(_), Err(_)) => {}
            _ => {
                return Err(TestCaseError::fail(format!(
                    "read directly: {result:?}; through a Value: {reference:?}"
                )))
            }
        }
        stats.compared += 1;
    }
    let datum_len = bytes.len().saturating_sub(HEADER_LEN);
    let writer = fingerprint_of(bytes).and_then(|fp| registry.lookup(fp));
    let err = match result {
        Ok(value) => {
            prop_assert!(
                writer.is_some_and(|w| w.kind() == T::KIND),
                "decoded as {} bytes whose header names {:?}",
                T::KIND,
                writer.map(|w| w.kind())
            );
            let first = encode(&value);
            let again: T = hookline_envelope::decode(&first).map_err(|e| {
                TestCaseError::fail(format!("{value:?} re-encodes to bytes that fail: {e:?}"))
            })?;
            prop_assert_eq!(format!("{again:?}"), format!("{value:?}"));
            prop_assert_eq!(encode(&again), first.clone(), "encoding is idempotent");
            stats.decoded += 1;
            stats.decoded_not_byte_identical += u64::from(first != bytes);
            return Ok(None);
        }
        Err(e) => e,
    };
    // Display and the quarantine mapping must work for every error.
    let _ = (err.to_string(), err.quarantine_reason());
    match (&err, writer) {
        (DecodeError::TooShort { len }, _) => {
            prop_assert!(bytes.len() < HEADER_LEN && *len == bytes.len(), "{err:?}")
        }
        (DecodeError::BadMagic { found }, _) => {
            prop_assert!(bytes.len() >= HEADER_LEN && bytes[..2] != MAGIC, "{err:?}");
            prop_assert_eq!(&found[..], &bytes[..2]);
        }
        (DecodeError::UnknownFingerprint { fingerprint }, None) => {
            prop_assert_eq!(Some(*fingerprint), fingerprint_of(bytes))
        }
        (DecodeError::WrongRecord { expected, found }, Some(w)) => {
            prop_assert!(*expected == T::KIND && *found == w.kind() && w.kind() != T::KIND)
        }
        (DecodeError::TrailingBytes { record, count }, Some(w)) => {
            prop_assert!(*record == T::KIND && w.kind() == T::KIND, "{err:?}");
            prop_assert!(*count > 0 && *count <= datum_len, "{err:?} of {datum_len}");
        }
        (DecodeError::BadDatum { record, source }, Some(w)) => {
            prop_assert!(*record == T::KIND && w.kind() == T::KIND, "{err:?}");
            match *source {
                DatumError::Truncated { at } => prop_assert!(at <= datum_len, "{err:?}"),
                DatumError::VarintOverflow { at } => prop_assert!(at + 10 <= datum_len),
                DatumError::BadLength {
                    at,
                    declared,
                    remaining,
                } => {
                    prop_assert!(at < datum_len && remaining < datum_len - at, "{err:?}");
                    prop_assert!(declared < 0 || declared as u64 > remaining as u64);
                }
                DatumError::BadIndex { at, index, len } => {
                    prop_assert!(at < datum_len, "{err:?}");
                    prop_assert!(index < 0 || index as u64 >= len as u64, "{err:?}");
                }
                DatumError::UnsupportedSchema => {
                    return Err(TestCaseError::fail(format!(
                        "a registered schema is unsupported: {err:?}"
                    )))
                }
                DatumError::Avro(_) => {}
            }
        }
        _ => {
            return Err(TestCaseError::fail(format!(
                "{err:?} contradicts the header {:02x?}",
                &bytes[..bytes.len().min(HEADER_LEN)]
            )))
        }
    }
    Ok(Some(err))
}

/// Decodes `bytes` as every record and checks each result; counts the result of the record
/// the header names (of `DomainEvent` when it names none, as all five then agree).
fn check(
    bytes: &[u8],
    expected: Option<&Expected>,
    stats: &mut Stats,
) -> Result<(), TestCaseError> {
    // Only inputs carrying an older or newer writer's fingerprint need the wider registry;
    // `decode` itself is `Registry::global().decode`.
    let fp = fingerprint_of(bytes);
    let registry = if fp.is_some_and(|fp| EVOLVED_ONLY.contains(&fp)) {
        &*EVOLVED
    } else {
        Registry::global()
    };
    let decoded_before = stats.decoded;
    let started = Instant::now();
    let results = [
        check_as::<DomainEvent>(registry, bytes, stats)?,
        check_as::<Subscription>(registry, bytes, stats)?,
        check_as::<Delivery>(registry, bytes, stats)?,
        check_as::<DeadLetter>(registry, bytes, stats)?,
        check_as::<QuarantinedEvent>(registry, bytes, stats)?,
        check_as::<AttemptRecord>(registry, bytes, stats)?,
        check_as::<EndpointHealth>(registry, bytes, stats)?,
    ];
    let took = started.elapsed();
    if took > stats.max_time {
        stats.max_time = took;
        stats.max_time_len = bytes.len();
    }
    prop_assert!(
        took < MAX_DECODE_TIME,
        "{took:?} to decode {} bytes",
        bytes.len()
    );
    let named = &results[registry.kind_of(bytes).map_or(0, |k| k as usize)];
    if let Some(x) = expected {
        let ok = match (x.role, named) {
            (
                Role::Length | Role::Count,
                Some(DecodeError::BadDatum {
                    source: DatumError::BadLength { at, declared, .. },
                    ..
                }),
            ) => *at == x.at && *declared == x.value,
            (
                Role::Index(n),
                Some(DecodeError::BadDatum {
                    source: DatumError::BadIndex { at, index, len },
                    ..
                }),
            ) => *at == x.at && *index == x.value && *len == n,
            _ => false,
        };
        prop_assert!(ok, "{x:?} was refused as {named:?}");
        stats.exact_varint_checks += 1;
    }
    if std::ptr::eq(registry, &*EVOLVED) {
        stats.other_writer += 1;
        stats.other_writer_decoded += stats.decoded - decoded_before;
    }
    let primary = named.as_ref().map_or_else(|| "decoded".to_owned(), label);
    *stats.results.entry(primary).or_default() += 1;
    stats.inputs += 1;
    Ok(())
}

fn vm_growth(before: Option<u64>) -> Result<String, String> {
    match (before, vm_peak_kib()) {
        (Some(before), Some(after)) => {
            let grown = after.saturating_sub(before);
            if grown > MAX_VM_GROWTH_KIB {
                return Err(format!("VmPeak grew by {grown} KiB"));
            }
            Ok(format!("{} MiB", grown / 1024))
        }
        _ => Ok("unknown (no /proc/self/status)".into()),
    }
}

#[test]
fn fuzz_envelope_decode_of_mutated_records() {
    let cases = fuzz_cases(DEFAULT_CASES);
    let seed = fuzz_seed();
    let vm_before = vm_peak_kib();
    let started = Instant::now();
    let stats = RefCell::new(Stats::default());
    let result = runner(cases, seed).run(&input(), |input| {
        let mut stats = stats.borrow_mut();
        let (bytes, expected) = match &input {
            Input::Mutated(seed, mutations) => {
                *stats.sources.entry("mutated").or_default() += 1;
                for m in mutations {
                    *stats.mutations.entry(m.name()).or_default() += 1;
                }
                mutate(seed, mutations)
            }
            Input::Random(bytes) => {
                *stats.sources.entry("random bytes").or_default() += 1;
                (bytes.clone(), None)
            }
            Input::RandomDatum(kind, datum) => {
                *stats
                    .sources
                    .entry("random datum after a valid header")
                    .or_default() += 1;
                let mut bytes = kind.current().header().to_vec();
                bytes.extend_from_slice(datum);
                (bytes, None)
            }
        };
        check(&bytes, expected.as_ref(), &mut stats)
    });
    let growth = vm_growth(vm_before);
    let stats = stats.into_inner();
    let summary = stats.summary(
        "mutated records",
        Some(seed),
        started.elapsed(),
        growth.as_deref().unwrap_or("over the limit"),
    );
    eprintln!("{summary}");
    if let Err(e) = result {
        panic!("{e}\n(replay with HOOKLINE_FUZZ_SEED={seed})");
    }
    if let Err(e) = growth {
        panic!("decoding reserved absurd memory: {e}");
    }
}

/// Exhaustive and deterministic: every truncation and every single-bit flip of every sample.
#[test]
fn fuzz_envelope_decode_every_truncation_and_bit_flip_of_the_samples() {
    let vm_before = vm_peak_kib();
    let started = Instant::now();
    let mut stats = Stats::default();
    for seed in samples() {
        let bytes = &seed.bytes;
        let mut inputs: Vec<Vec<u8>> = (0..=bytes.len()).map(|n| bytes[..n].to_vec()).collect();
        for i in 0..bytes.len() * 8 {
            let mut flipped = bytes.clone();
            flipped[i / 8] ^= 1 << (i % 8);
            inputs.push(flipped);
        }
        for input in inputs {
            if let Err(e) = check(&input, None, &mut stats) {
                panic!("{e}\ninput {} {input:02x?}", seed.kind);
            }
        }
    }
    let growth = vm_growth(vm_before);
    eprintln!(
        "{}",
        stats.summary(
            "every truncation and bit flip",
            None,
            started.elapsed(),
            growth.as_deref().unwrap_or("over the limit"),
        )
    );
    if let Err(e) = growth {
        panic!("decoding reserved absurd memory: {e}");
    }
}
