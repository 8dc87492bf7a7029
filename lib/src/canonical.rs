//! The canonical encoding that generation ids and node records are computed from.
//!
//! A value is serialised with serde to a JSON tree, then written with:
//! - object keys sorted by their UTF-8 bytes, at every depth (so neither struct field order nor
//!   map insertion order can change the bytes);
//! - no insignificant whitespace in the compact form;
//! - strings escaped exactly as `serde_json` escapes them (`"`, `\`, control characters);
//! - integers only: a floating-point number is refused, since its text is not unique.
//!
//! [`to_canonical_pretty`] is the same tree with two-space indentation and a final newline: the
//! diff-friendly form of the node record. Both forms parse back to the same value.

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
