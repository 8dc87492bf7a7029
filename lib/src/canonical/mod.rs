//! The canonical encoding that generation ids and node records are computed from.
//!
//! A value is written from serde's calls ([`direct`]) as the JSON tree serde would make of it,
//! with:
//! - object keys sorted by their UTF-8 bytes, at every depth (so neither struct field order nor
//!   map insertion order can change the bytes);
//! - no insignificant whitespace in the compact form;
//! - strings escaped exactly as `serde_json` escapes them (`"`, `\`, control characters);
//! - integers only: a floating-point number is refused, since its text is not unique.
//!
//! [`to_canonical_pretty`] is the same tree with two-space indentation and a final newline: the
//! diff-friendly form of the node record. Both forms parse back to the same value.

mod direct;

use serde::Serialize;
use serde_json::Value;

/// A value that has no canonical encoding.
#[derive(Debug, thiserror::Error)]
pub enum CanonicalError {
    /// serde could not serialise the value.
    #[error("cannot serialise: {0}")]
    Serialize(#[from] serde_json::Error),
    /// A float somewhere in the tree.
    #[error("`{0}` is not an integer; the canonical encoding has integers only")]
    Float(String),
}

/// The compact canonical bytes of `value`.
pub fn to_canonical_json<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, CanonicalError> {
    let mut out = Vec::with_capacity(4096);
    value.serialize(direct::Writer { out: &mut out })?;
    Ok(out)
}

/// The compact canonical bytes of `value`, through a JSON tree: what [`to_canonical_json`]
/// gives, the slow way (the tests compare the two).
#[cfg(test)]
fn to_canonical_via_tree<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, CanonicalError> {
    let tree = serde_json::to_value(value)?;
    let mut out = Vec::with_capacity(4096);
    write(&tree, &mut out, None, 0)?;
    Ok(out)
}

/// The indented canonical bytes of `value`, ending with a newline.
pub fn to_canonical_pretty<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, CanonicalError> {
    let tree = serde_json::to_value(value)?;
    let mut out = Vec::with_capacity(4096);
    write(&tree, &mut out, Some(2), 0)?;
    out.push(b'\n');
    Ok(out)
}

fn newline(out: &mut Vec<u8>, indent: Option<usize>, depth: usize) {
    if let Some(step) = indent {
        out.push(b'\n');
        out.extend(std::iter::repeat_n(b' ', step * depth));
    }
}

fn write(
    v: &Value,
    out: &mut Vec<u8>,
    indent: Option<usize>,
    depth: usize,
) -> Result<(), CanonicalError> {
    match v {
        Value::Null | Value::Bool(_) | Value::String(_) => {
            serde_json::to_writer(&mut *out, v)?;
        }
        Value::Number(n) => {
            if !(n.is_i64() || n.is_u64()) {
                return Err(CanonicalError::Float(n.to_string()));
            }
            serde_json::to_writer(&mut *out, n)?;
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                newline(out, indent, depth + 1);
                write(item, out, indent, depth + 1)?;
            }
            if !items.is_empty() {
                newline(out, indent, depth);
            }
            out.push(b']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push(b'{');
            for (i, (k, item)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                newline(out, indent, depth + 1);
                serde_json::to_writer(&mut *out, k)?;
                out.push(b':');
                if indent.is_some() {
                    out.push(b' ');
                }
                write(item, out, indent, depth + 1)?;
            }
            if !entries.is_empty() {
                newline(out, indent, depth);
            }
            out.push(b'}');
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Key order in the input never changes the bytes; the bytes are the documented form.
    #[test]
    fn keys_are_sorted_at_every_depth() {
        let a = json!({"b": 1, "a": {"z": [1, "x"], "y": null}});
        let mut m = serde_json::Map::new();
        m.insert("a".into(), json!({"y": null, "z": [1, "x"]}));
        m.insert("b".into(), json!(1));
        let b = Value::Object(m);
        let ca = to_canonical_json(&a).unwrap();
        assert_eq!(ca, to_canonical_json(&b).unwrap());
        assert_eq!(ca, br#"{"a":{"y":null,"z":[1,"x"]},"b":1}"#);
    }

    /// Random trees whose objects give their keys in any order, some twice, keys with escapes
    /// and non-ASCII text among them: the direct writer writes what the tree does.
    #[test]
    fn the_direct_writer_writes_what_the_tree_does() {
        enum T {
            Leaf(Value),
            Array(Vec<T>),
            Object(Vec<(String, T)>),
        }
        impl Serialize for T {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                use serde::ser::SerializeMap;
                match self {
                    T::Leaf(v) => v.serialize(s),
                    T::Array(items) => items.serialize(s),
                    T::Object(entries) => {
                        let mut m = s.serialize_map(Some(entries.len()))?;
                        for (k, v) in entries {
                            m.serialize_entry(k, v)?;
                        }
                        m.end()
                    }
                }
            }
        }
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        fn tree(next: &mut dyn FnMut() -> u64, depth: u32) -> T {
            const KEYS: [&str; 9] = ["a", "b", "B", "é", "a\"b", "\u{1}", "zz", "", "a0"];
            match next() % if depth > 3 { 4 } else { 6 } {
                0 => T::Leaf(Value::Null),
                1 => T::Leaf(Value::Bool(next().is_multiple_of(2))),
                2 => T::Leaf(json!(next() as i64 >> (next() % 64))),
                3 => T::Leaf(Value::String(
                    KEYS[(next() % 9) as usize].repeat((next() % 3) as usize),
                )),
                4 => T::Array((0..next() % 4).map(|_| tree(next, depth + 1)).collect()),
                _ => T::Object(
                    (0..next() % 7)
                        .map(|_| {
                            (
                                KEYS[(next() % 9) as usize].to_owned(),
                                tree(next, depth + 1),
                            )
                        })
                        .collect(),
                ),
            }
        }
        for _ in 0..3000 {
            let v = tree(&mut next, 0);
            assert_eq!(
                String::from_utf8(to_canonical_json(&v).unwrap()).unwrap(),
                String::from_utf8(to_canonical_via_tree(&v).unwrap()).unwrap()
            );
        }
    }

    /// Every shape serde derives — fields out of order, maps keyed by numbers, each kind of
    /// enum variant, tags, flattened fields given twice, options, tuples, bytes — the same
    /// bytes as through the tree.
    #[test]
    fn every_shape_serde_derives_is_written_as_the_tree_writes_it() {
        use std::collections::BTreeMap;
        #[derive(serde::Serialize)]
        enum E {
            Unit,
            New(u8),
            Tuple(i32, String),
            Struct { z: bool, a: Option<u8> },
        }
        #[derive(serde::Serialize)]
        #[serde(tag = "kind", rename_all = "lowercase")]
        enum Tagged {
            Held { original: String },
            Managed,
        }
        #[derive(serde::Serialize)]
        struct Inner {
            y: u8,
            x: u8,
        }
        #[derive(serde::Serialize)]
        struct Outer {
            zeta: Vec<E>,
            alpha: BTreeMap<u32, Tagged>,
            #[serde(skip_serializing_if = "Option::is_none")]
            gone: Option<u8>,
            none: Option<u8>,
            #[serde(flatten)]
            inner: Inner,
            #[serde(flatten)]
            again: BTreeMap<String, u8>,
            tuple: (u8, &'static str, ()),
            #[serde(with = "serde_bytes_like")]
            bytes: Vec<u8>,
            big: u64,
            small: i64,
            c: char,
        }
        mod serde_bytes_like {
            pub fn serialize<S: serde::Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
                s.serialize_bytes(v)
            }
        }
        let v = Outer {
            zeta: vec![
                E::Unit,
                E::New(7),
                E::Tuple(-3, "t\n".into()),
                E::Struct { z: true, a: None },
            ],
            alpha: BTreeMap::from([
                (10, Tagged::Managed),
                (
                    9,
                    Tagged::Held {
                        original: "o".into(),
                    },
                ),
            ]),
            gone: None,
            none: None,
            inner: Inner { y: 1, x: 2 },
            again: BTreeMap::from([("x".to_owned(), 3), ("w".to_owned(), 4)]),
            tuple: (1, "two", ()),
            bytes: vec![0, 255],
            big: u64::MAX,
            small: i64::MIN,
            c: '"',
        };
        assert_eq!(
            String::from_utf8(to_canonical_json(&v).unwrap()).unwrap(),
            String::from_utf8(to_canonical_via_tree(&v).unwrap()).unwrap()
        );
        assert!(matches!(
            to_canonical_json(&1.5_f64),
            Err(CanonicalError::Float(_))
        ));
    }

    /// Floats have no canonical text and are refused.
    #[test]
    fn floats_are_refused() {
        assert!(matches!(
            to_canonical_json(&json!({"x": 1.5})),
            Err(CanonicalError::Float(_))
        ));
    }

    /// The pretty form is the same tree.
    #[test]
    fn pretty_parses_back_to_the_same_value() {
        let v = json!({"b": [1, 2], "a": {"c": "d"}, "e": [], "f": {}});
        let pretty = to_canonical_pretty(&v).unwrap();
        assert_eq!(serde_json::from_slice::<Value>(&pretty).unwrap(), v);
        assert!(pretty.ends_with(b"\n"));
    }
}
