//! The 10-byte single-object header, `C3 01` + the writer schema's fingerprint
//! (little-endian): written by the schemas, read by the codec. A leaf: it knows bytes,
//! not schemas or records.

/// The two marker bytes that open every single-object encoded value.
pub const MAGIC: [u8; 2] = [0xC3, 0x01];

/// Magic plus fingerprint: the bytes before the datum.
pub const HEADER_LEN: usize = 10;

/// The writer fingerprint of single-object `bytes`, if they have the header.
pub fn fingerprint_of(bytes: &[u8]) -> Option<u64> {
    let header = bytes.get(..HEADER_LEN)?;
    if header[..2] != MAGIC {
        return None;
    }
    let mut fp = [0u8; 8];
    fp.copy_from_slice(&header[2..]);
    Some(u64::from_le_bytes(fp))
}

/// The header of a datum written with the schema of this `fingerprint`.
pub(crate) fn header_for(fingerprint: u64) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..2].copy_from_slice(&MAGIC);
    h[2..].copy_from_slice(&fingerprint.to_le_bytes());
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_reads_back_its_fingerprint() {
        for fp in [0, 1, 0x0123_4567_89ab_cdef, u64::MAX] {
            assert_eq!(fingerprint_of(&header_for(fp)), Some(fp));
        }
    }

    #[test]
    fn short_or_unmarked_bytes_have_no_fingerprint() {
        assert_eq!(fingerprint_of(&[]), None);
        assert_eq!(fingerprint_of(&MAGIC), None);
        let mut bytes = header_for(7);
        bytes[0] = 0;
        assert_eq!(fingerprint_of(&bytes), None);
    }
}
