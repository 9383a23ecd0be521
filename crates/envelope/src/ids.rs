//! Delivery ids: the `webhook-id` header and the receiver's idempotency key.
//!
//! Guarantees: [`delivery_id`] is a pure function of (event_id, subscription_id), identical
//! on every attempt, replay and duplicate, in every release and every language that follows
//! the algorithm below; distinct pairs give distinct names (the encoding is unambiguous), so
//! ids differ unless SHA-1 collides.

use uuid::Uuid;

/// The UUIDv5 namespace of delivery ids: `d39456ef-998c-50cb-8263-db6c4e366142`, itself
/// UUIDv5(NAMESPACE_URL, `"https://hookline.dev/ns/delivery-id/v1"`). Fixed forever.
pub const DELIVERY_ID_NAMESPACE: Uuid = Uuid::from_u128(0xd394_56ef_998c_50cb_8263_db6c_4e36_6142);

/// Prefix of every delivery id, in the style of Standard Webhooks message ids.
pub const DELIVERY_ID_PREFIX: &str = "msg_";

/// The delivery id of `event_id` delivered to `subscription_id`.
///
/// Algorithm (stable forever; reproduce it byte for byte in other languages):
///
/// 1. `name` = `len(e)` ‖ `e` ‖ `len(s)` ‖ `s`, where `e` and `s` are the UTF-8 bytes of
///    event_id and subscription_id and `len` is the byte length as an 8-byte big-endian
///    unsigned integer. The length prefixes make ("ab", "c") and ("a", "bc") differ.
/// 2. `u` = UUIDv5([`DELIVERY_ID_NAMESPACE`], `name`) per RFC 9562: the first 16 bytes of
///    SHA-1(namespace's 16 bytes ‖ `name`), then byte 6 = (byte 6 & 0x0f) | 0x50 and
///    byte 8 = (byte 8 & 0x3f) | 0x80.
/// 3. The id is `msg_` followed by the 32 lowercase hex digits of `u`, without hyphens
///    (36 ASCII characters in all).
///
/// ```
/// assert_eq!(
///     hookline_envelope::delivery_id("evt_1", "sub_1"),
///     "msg_20e1242c711154e9a82e4856a8cc2c18"
/// );
/// ```
pub fn delivery_id(event_id: &str, subscription_id: &str) -> String {
    let (e, s) = (event_id.as_bytes(), subscription_id.as_bytes());
    let mut name = Vec::with_capacity(16 + e.len() + s.len());
    name.extend_from_slice(&(e.len() as u64).to_be_bytes());
    name.extend_from_slice(e);
    name.extend_from_slice(&(s.len() as u64).to_be_bytes());
    name.extend_from_slice(s);
    let uuid = Uuid::new_v5(&DELIVERY_ID_NAMESPACE, &name);
    format!("{DELIVERY_ID_PREFIX}{}", uuid.simple())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespace_is_derived_as_documented() {
        let derived = Uuid::new_v5(
            &Uuid::NAMESPACE_URL,
            b"https://hookline.dev/ns/delivery-id/v1",
        );
        assert_eq!(derived, DELIVERY_ID_NAMESPACE);
        assert_eq!(
            DELIVERY_ID_NAMESPACE.to_string(),
            "d39456ef-998c-50cb-8263-db6c4e366142"
        );
    }

    #[test]
    fn delivery_id_is_pinned_forever() {
        // Changing any of these breaks receivers' idempotency: never update them.
        let vectors = [
            ("evt_1", "sub_1", "msg_20e1242c711154e9a82e4856a8cc2c18"),
            ("", "", "msg_91793fa67e8e5fc39422364d74e493cb"),
            (
                "01J9Z3évènement",
                "sub_ü",
                "msg_c96abbae003f574692392d72ea0ced12",
            ),
        ];
        for (e, s, want) in vectors {
            assert_eq!(delivery_id(e, s), want, "delivery_id({e:?}, {s:?})");
        }
    }

    #[test]
    fn delivery_id_is_unambiguous_at_the_boundary() {
        assert_ne!(delivery_id("ab", "c"), delivery_id("a", "bc"));
        assert_ne!(delivery_id("", "abc"), delivery_id("abc", ""));
        assert_ne!(delivery_id("a", "b"), delivery_id("b", "a"));
    }

    #[test]
    fn delivery_id_has_the_documented_shape() {
        let id = delivery_id("evt_1", "sub_1");
        assert_eq!(id.len(), 36);
        let hex = id.strip_prefix("msg_").unwrap();
        assert!(hex
            .chars()
            .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c)));
        assert_eq!(&hex[12..13], "5", "UUID version nibble");
    }
}
