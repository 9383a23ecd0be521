//! Standard Webhooks signing (<https://www.standardwebhooks.com/>): every request
//! carries `webhook-id`, `webhook-timestamp` and `webhook-signature`, the last being
//! one space-separated `v1,<base64 HMAC-SHA256(key, "{id}.{timestamp}.{body}")>` per
//! active secret, so a receiver keeps verifying while secrets rotate. Signatures are
//! computed at attempt time and never stored.

mod secrets;

use base64::{engine::general_purpose::STANDARD, Engine};
use hmac::{Hmac, Mac};
use sha2::Sha256;

pub use secrets::{SecretError, SecretStore};

/// The prefix of a Standard Webhooks secret.
pub const SECRET_PREFIX: &str = "whsec_";

/// Header names, lowercase as HTTP/2 requires.
pub const HEADER_ID: &str = "webhook-id";
pub const HEADER_TIMESTAMP: &str = "webhook-timestamp";
pub const HEADER_SIGNATURE: &str = "webhook-signature";

/// A decoded signing key. Its `Debug` never shows the key.
#[derive(Clone, PartialEq, Eq)]
pub struct SigningKey(Vec<u8>);

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SigningKey({} bytes)", self.0.len())
    }
}

/// Why a secret line is not a usable key. Never contains the secret itself.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("does not start with `whsec_`")]
    Prefix,
    #[error("the part after `whsec_` is not valid base64")]
    Base64,
    #[error("the key is empty")]
    Empty,
}

impl SigningKey {
    /// Parses `whsec_<base64>`; the key is the base64-decoded part after the prefix.
    pub fn parse(secret: &str) -> Result<Self, KeyError> {
        let encoded = secret
            .trim()
            .strip_prefix(SECRET_PREFIX)
            .ok_or(KeyError::Prefix)?;
        let key = STANDARD.decode(encoded).map_err(|_| KeyError::Base64)?;
        if key.is_empty() {
            return Err(KeyError::Empty);
        }
        Ok(Self(key))
    }

    /// A key from raw bytes (tests, tools).
    pub fn from_bytes(key: Vec<u8>) -> Self {
        Self(key)
    }

    /// `v1,<base64 HMAC-SHA256(key, "{id}.{timestamp}.{body}")>`.
    pub fn sign(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC accepts any key size");
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
    }
}

/// The three signature headers of one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignatureHeaders {
    /// `webhook-id`: the delivery id.
    pub id: String,
    /// `webhook-timestamp`: Unix seconds of the attempt.
    pub timestamp: i64,
    /// `webhook-signature`: one `v1,` signature per key, space-separated.
    pub signature: String,
}

/// Signs `body` for delivery `id` at `timestamp` (Unix seconds) with every key.
pub fn sign(keys: &[SigningKey], id: &str, timestamp: i64, body: &[u8]) -> SignatureHeaders {
    let signature = keys
        .iter()
        .map(|k| k.sign(id, timestamp, body))
        .collect::<Vec<_>>()
        .join(" ");
    SignatureHeaders {
        id: id.to_owned(),
        timestamp,
        signature,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example of the Standard Webhooks specification's reference libraries.
    #[test]
    fn matches_the_reference_test_vector() {
        let key = SigningKey::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let sig = key.sign(
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            br#"{"test": 2432232314}"#,
        );
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    #[test]
    fn several_keys_give_space_separated_signatures_in_order() {
        let a = SigningKey::from_bytes(b"first".to_vec());
        let b = SigningKey::from_bytes(b"second".to_vec());
        let h = sign(&[a.clone(), b.clone()], "msg_1", 42, b"{}");
        assert_eq!(
            h.signature,
            format!(
                "{} {}",
                a.sign("msg_1", 42, b"{}"),
                b.sign("msg_1", 42, b"{}")
            )
        );
        assert_ne!(a.sign("msg_1", 42, b"{}"), b.sign("msg_1", 42, b"{}"));
        assert_ne!(a.sign("msg_1", 43, b"{}"), a.sign("msg_1", 42, b"{}"));
    }

    #[test]
    fn parse_errors_table() {
        let cases = [
            ("whsec_", Err(KeyError::Empty)),
            ("sk_abc", Err(KeyError::Prefix)),
            ("whsec_%%%", Err(KeyError::Base64)),
            ("  whsec_YWJj  ", Ok(SigningKey(b"abc".to_vec()))),
        ];
        for (input, want) in cases {
            assert_eq!(SigningKey::parse(input), want, "{input:?}");
        }
    }

    #[test]
    fn debug_never_shows_the_key() {
        let key = SigningKey::parse("whsec_c2VjcmV0").unwrap();
        assert_eq!(format!("{key:?}"), "SigningKey(6 bytes)");
    }
}
