//! Content hashes as newtypes: a [`BlobHash`] names bytes in the store, a [`GenerationId`] names a
//! generation. Both are blake3 digests, shown and serialised as `b3:<64 hex digits>`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The prefix every digest is shown with, so a hash says which function made it.
pub const DIGEST_PREFIX: &str = "b3:";

/// A digest string that is not `b3:` followed by 64 lowercase hex digits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{input}` is not a digest: expected `b3:` followed by 64 hex digits")]
pub struct DigestParseError {
    /// What was given.
    pub input: String,
}

/// A lowercase hex digit's value. Ids are read by the ten thousand on a large node: no
/// allocation, no table of options.
fn nibble(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

macro_rules! digest_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name([u8; 32]);

        impl $name {
            /// The digest of `bytes`.
            pub fn of(bytes: &[u8]) -> Self {
                Self(*blake3::hash(bytes).as_bytes())
            }

            /// Wraps a raw 32-byte digest.
            pub fn from_bytes(bytes: [u8; 32]) -> Self {
                Self(bytes)
            }

            /// The raw 32-byte digest.
            pub fn as_bytes(&self) -> &[u8; 32] {
                &self.0
            }

            /// The 64 lowercase hex digits, without prefix (the name of the object on disk).
            pub fn hex(&self) -> String {
                hex::encode(self.0)
            }

            /// Parses 64 hex digits without the prefix.
            pub fn from_hex(hex_digits: &str) -> Result<Self, DigestParseError> {
                let err = || DigestParseError { input: hex_digits.to_owned() };
                let digits = hex_digits.as_bytes();
                if digits.len() != 64 {
                    return Err(err());
                }
                let mut out = [0u8; 32];
                for (byte, pair) in out.iter_mut().zip(digits.chunks_exact(2)) {
                    *byte = (nibble(pair[0]).ok_or_else(err)? << 4) | nibble(pair[1]).ok_or_else(err)?;
                }
                Ok(Self(out))
            }

            /// A short form for people: the prefix and the first 12 digits.
            pub fn short(&self) -> String {
                format!("{DIGEST_PREFIX}{}", &self.hex()[..12])
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{DIGEST_PREFIX}{}", self.hex())
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({})", stringify!($name), self)
            }
        }

        impl FromStr for $name {
            type Err = DigestParseError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                let digits = s
                    .strip_prefix(DIGEST_PREFIX)
                    .ok_or_else(|| DigestParseError { input: s.to_owned() })?;
                Self::from_hex(digits).map_err(|_| DigestParseError { input: s.to_owned() })
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                // Written in place: a large generation holds ten thousand digests.
                const HEX: &[u8; 16] = b"0123456789abcdef";
                let mut text = [0u8; 67];
                text[..3].copy_from_slice(DIGEST_PREFIX.as_bytes());
                for (i, byte) in self.0.iter().enumerate() {
                    text[3 + 2 * i] = HEX[usize::from(byte >> 4)];
                    text[4 + 2 * i] = HEX[usize::from(byte & 0xf)];
                }
                s.serialize_str(std::str::from_utf8(&text).expect("ASCII"))
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                // Read in place: a large generation holds ten thousand digests.
                struct Text;
                impl serde::de::Visitor<'_> for Text {
                    type Value = $name;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str("a digest `b3:` followed by 64 hex digits")
                    }
                    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<$name, E> {
                        s.parse().map_err(E::custom)
                    }
                }
                d.deserialize_str(Text)
            }
        }
    };
}

digest_type!(
    /// The blake3 digest of a blob's bytes: the blob's name in the store.
    BlobHash
);
digest_type!(
    /// The blake3 digest of a generation's canonical encoding: the generation's name.
    GenerationId
);

#[cfg(test)]
mod tests {
    use super::*;

    /// A digest survives display and parse unchanged, and only the canonical form parses.
    #[test]
    fn digest_round_trips_and_rejects_other_forms() {
        let h = BlobHash::of(b"hello");
        let shown = h.to_string();
        assert!(shown.starts_with("b3:"));
        assert_eq!(shown.parse::<BlobHash>().unwrap(), h);
        assert!(shown.to_uppercase().parse::<BlobHash>().is_err());
        assert!(
            h.hex().parse::<BlobHash>().is_err(),
            "the prefix is required"
        );
        assert!("b3:abc".parse::<BlobHash>().is_err());
        let json = serde_json::to_string(&h).unwrap();
        assert_eq!(serde_json::from_str::<BlobHash>(&json).unwrap(), h);
    }
}
