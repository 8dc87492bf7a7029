//! The compact canonical encoding written straight from serde's calls, with no JSON tree in
//! between: a generation of thousands of files is encoded on every build, and building its
//! tree of `serde_json::Value`s first cost most of the encoding.
//!
//! An object's entries are written in the order serde gives them, each remembered by its key;
//! if the keys are not already in order, the object's bytes are put in order once it ends. A
//! key given twice keeps its last value, as a JSON tree would. The bytes are those of
//! [`super::to_canonical_via_tree`], which the tests hold this to.

use std::borrow::Cow;
use std::ops::Range;

use serde::ser::{self, Serialize};

use super::CanonicalError;

impl ser::Error for CanonicalError {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        CanonicalError::Serialize(<serde_json::Error as ser::Error>::custom(msg))
    }
}

/// Writes canonical JSON into `out`.
pub(super) struct Writer<'a> {
    pub(super) out: &'a mut Vec<u8>,
}

fn string(out: &mut Vec<u8>, s: &str) -> Result<(), CanonicalError> {
    serde_json::to_writer(&mut *out, s)?;
    Ok(())
}

fn integer(out: &mut Vec<u8>, n: impl std::fmt::Display) {
    use std::io::Write;
    // Writing into a Vec cannot fail.
    let _ = write!(out, "{n}");
}

/// An object being written: where its entries begin, and each entry's key and bytes.
pub(super) struct Object<'a> {
    out: &'a mut Vec<u8>,
    /// Just past the `{`.
    start: usize,
    /// Each entry's key and where its `"key":value` is (no separating comma included).
    entries: Vec<(Cow<'static, str>, Range<usize>)>,
    /// The key of a map entry whose value comes next.
    key: Option<Cow<'static, str>>,
}

impl<'a> Object<'a> {
    fn begin(out: &'a mut Vec<u8>) -> Self {
        out.push(b'{');
        let start = out.len();
        Object {
            out,
            start,
            // Room for a struct's fields at once: growing the list field by field was a fifth
            // of encoding a generation of thousands of files.
            entries: Vec::with_capacity(16),
            key: None,
        }
    }

    fn entry<T: Serialize + ?Sized>(
        &mut self,
        key: Cow<'static, str>,
        value: &T,
    ) -> Result<(), CanonicalError> {
        if !self.entries.is_empty() {
            self.out.push(b',');
        }
        let at = self.out.len();
        string(self.out, &key)?;
        self.out.push(b':');
        value.serialize(Writer { out: self.out })?;
        self.entries.push((key, at..self.out.len()));
        Ok(())
    }

    fn end(self) -> Result<&'a mut Vec<u8>, CanonicalError> {
        let Object {
            out,
            start,
            mut entries,
            ..
        } = self;
        let in_order = entries
            .windows(2)
            .all(|w| w[0].0.as_bytes() < w[1].0.as_bytes());
        if !in_order {
            // The entries in order after what was written, which then goes: no allocation.
            let end = out.len();
            // Stable: of a key given twice, the last one written is the last of its run.
            entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            let mut first = true;
            for (i, (key, range)) in entries.iter().enumerate() {
                if entries.get(i + 1).is_some_and(|next| next.0 == *key) {
                    continue;
                }
                if !first {
                    out.push(b',');
                }
                first = false;
                out.extend_from_within(range.clone());
            }
            out.drain(start..end);
        }
        out.push(b'}');
        Ok(out)
    }
}

/// An array being written.
pub(super) struct Array<'a> {
    out: &'a mut Vec<u8>,
    empty: bool,
}

impl<'a> Array<'a> {
    fn begin(out: &'a mut Vec<u8>) -> Self {
        out.push(b'[');
        Array { out, empty: true }
    }

    fn item<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), CanonicalError> {
        if !self.empty {
            self.out.push(b',');
        }
        self.empty = false;
        value.serialize(Writer { out: self.out })
    }

    fn end(self) -> &'a mut Vec<u8> {
        self.out.push(b']');
        self.out
    }
}

/// `{"variant":` … `}` around a variant's content.
pub(super) struct Variant<C>(C);

fn begin_variant<'a>(
    out: &'a mut Vec<u8>,
    variant: &str,
) -> Result<&'a mut Vec<u8>, CanonicalError> {
    out.push(b'{');
    string(out, variant)?;
    out.push(b':');
    Ok(out)
}

/// Serializer methods for integers, each `fn name(self, v: type)` returning `$body`'s value.
macro_rules! integers {
    ($ok:ty, |$s:ident, $v:ident| $body:expr; $($name:ident: $t:ty),*) => {$(
        fn $name($s, $v: $t) -> Result<$ok, CanonicalError> {
            $body
        }
    )*};
}

impl<'a> ser::Serializer for Writer<'a> {
    type Ok = ();
    type Error = CanonicalError;
    type SerializeSeq = Array<'a>;
    type SerializeTuple = Array<'a>;
    type SerializeTupleStruct = Array<'a>;
    type SerializeTupleVariant = Variant<Array<'a>>;
    type SerializeMap = Object<'a>;
    type SerializeStruct = Object<'a>;
    type SerializeStructVariant = Variant<Object<'a>>;

    fn serialize_bool(self, v: bool) -> Result<(), CanonicalError> {
        self.out
            .extend_from_slice(if v { b"true" } else { b"false" });
        Ok(())
    }
    integers!((), |self, v| {
        integer(self.out, v);
        Ok(())
    }; serialize_i8: i8, serialize_i16: i16, serialize_i32: i32, serialize_i64: i64,
       serialize_u8: u8, serialize_u16: u16, serialize_u32: u32, serialize_u64: u64);

    fn serialize_i128(self, v: i128) -> Result<(), CanonicalError> {
        if i64::try_from(v).is_err() && u64::try_from(v).is_err() {
            return Err(<CanonicalError as ser::Error>::custom(
                "number out of range",
            ));
        }
        integer(self.out, v);
        Ok(())
    }
    fn serialize_u128(self, v: u128) -> Result<(), CanonicalError> {
        if u64::try_from(v).is_err() {
            return Err(<CanonicalError as ser::Error>::custom(
                "number out of range",
            ));
        }
        integer(self.out, v);
        Ok(())
    }
    fn serialize_f32(self, v: f32) -> Result<(), CanonicalError> {
        Err(CanonicalError::Float(v.to_string()))
    }
    fn serialize_f64(self, v: f64) -> Result<(), CanonicalError> {
        Err(CanonicalError::Float(v.to_string()))
    }
    fn serialize_char(self, v: char) -> Result<(), CanonicalError> {
        string(self.out, v.encode_utf8(&mut [0; 4]))
    }
    fn serialize_str(self, v: &str) -> Result<(), CanonicalError> {
        string(self.out, v)
    }
    fn serialize_bytes(self, v: &[u8]) -> Result<(), CanonicalError> {
        let mut a = Array::begin(self.out);
        for b in v {
            a.item(b)?;
        }
        a.end();
        Ok(())
    }
    fn serialize_none(self) -> Result<(), CanonicalError> {
        self.serialize_unit()
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), CanonicalError> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), CanonicalError> {
        self.out.extend_from_slice(b"null");
        Ok(())
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Result<(), CanonicalError> {
        self.serialize_unit()
    }
    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<(), CanonicalError> {
        string(self.out, variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<(), CanonicalError> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), CanonicalError> {
        let out = begin_variant(self.out, variant)?;
        value.serialize(Writer { out: &mut *out })?;
        out.push(b'}');
        Ok(())
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<Array<'a>, CanonicalError> {
        Ok(Array::begin(self.out))
    }
    fn serialize_tuple(self, _len: usize) -> Result<Array<'a>, CanonicalError> {
        Ok(Array::begin(self.out))
    }
    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<Array<'a>, CanonicalError> {
        Ok(Array::begin(self.out))
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Variant<Array<'a>>, CanonicalError> {
        Ok(Variant(Array::begin(begin_variant(self.out, variant)?)))
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<Object<'a>, CanonicalError> {
        Ok(Object::begin(self.out))
    }
    fn serialize_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<Object<'a>, CanonicalError> {
        Ok(Object::begin(self.out))
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Variant<Object<'a>>, CanonicalError> {
        Ok(Variant(Object::begin(begin_variant(self.out, variant)?)))
    }
}

impl ser::SerializeSeq for Array<'_> {
    type Ok = ();
    type Error = CanonicalError;
    fn serialize_element<T: Serialize + ?Sized>(
        &mut self,
        value: &T,
    ) -> Result<(), CanonicalError> {
        self.item(value)
    }
    fn end(self) -> Result<(), CanonicalError> {
        Array::end(self);
        Ok(())
    }
}

impl ser::SerializeTuple for Array<'_> {
    type Ok = ();
    type Error = CanonicalError;
    fn serialize_element<T: Serialize + ?Sized>(
        &mut self,
        value: &T,
    ) -> Result<(), CanonicalError> {
        self.item(value)
    }
    fn end(self) -> Result<(), CanonicalError> {
        Array::end(self);
        Ok(())
    }
}

impl ser::SerializeTupleStruct for Array<'_> {
    type Ok = ();
    type Error = CanonicalError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), CanonicalError> {
        self.item(value)
    }
    fn end(self) -> Result<(), CanonicalError> {
        Array::end(self);
        Ok(())
    }
}

impl ser::SerializeTupleVariant for Variant<Array<'_>> {
    type Ok = ();
    type Error = CanonicalError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), CanonicalError> {
        self.0.item(value)
    }
    fn end(self) -> Result<(), CanonicalError> {
        self.0.end().push(b'}');
        Ok(())
    }
}

impl ser::SerializeMap for Object<'_> {
    type Ok = ();
    type Error = CanonicalError;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), CanonicalError> {
        self.key = Some(Cow::Owned(key.serialize(KeyWriter)?));
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), CanonicalError> {
        let key = self
            .key
            .take()
            .ok_or_else(|| <CanonicalError as ser::Error>::custom("a map value without its key"))?;
        self.entry(key, value)
    }
    fn end(self) -> Result<(), CanonicalError> {
        Object::end(self).map(drop)
    }
}

impl ser::SerializeStruct for Object<'_> {
    type Ok = ();
    type Error = CanonicalError;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), CanonicalError> {
        self.entry(Cow::Borrowed(key), value)
    }
    fn end(self) -> Result<(), CanonicalError> {
        Object::end(self).map(drop)
    }
}

impl ser::SerializeStructVariant for Variant<Object<'_>> {
    type Ok = ();
    type Error = CanonicalError;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), CanonicalError> {
        self.0.entry(Cow::Borrowed(key), value)
    }
    fn end(self) -> Result<(), CanonicalError> {
        self.0.end()?.push(b'}');
        Ok(())
    }
}

/// A map's key, as a JSON tree would hold it: a string, or a number, a boolean or a unit
/// variant written as one.
struct KeyWriter;

fn key_refused() -> CanonicalError {
    <CanonicalError as ser::Error>::custom("key must be a string")
}

impl ser::Serializer for KeyWriter {
    type Ok = String;
    type Error = CanonicalError;
    type SerializeSeq = ser::Impossible<String, CanonicalError>;
    type SerializeTuple = ser::Impossible<String, CanonicalError>;
    type SerializeTupleStruct = ser::Impossible<String, CanonicalError>;
    type SerializeTupleVariant = ser::Impossible<String, CanonicalError>;
    type SerializeMap = ser::Impossible<String, CanonicalError>;
    type SerializeStruct = ser::Impossible<String, CanonicalError>;
    type SerializeStructVariant = ser::Impossible<String, CanonicalError>;

    fn serialize_bool(self, v: bool) -> Result<String, CanonicalError> {
        Ok(v.to_string())
    }
    integers!(String, |self, v| Ok(v.to_string());
       serialize_i8: i8, serialize_i16: i16, serialize_i32: i32, serialize_i64: i64,
       serialize_i128: i128, serialize_u8: u8, serialize_u16: u16, serialize_u32: u32,
       serialize_u64: u64, serialize_u128: u128);

    fn serialize_f32(self, v: f32) -> Result<String, CanonicalError> {
        Err(CanonicalError::Float(v.to_string()))
    }
    fn serialize_f64(self, v: f64) -> Result<String, CanonicalError> {
        Err(CanonicalError::Float(v.to_string()))
    }
    fn serialize_char(self, v: char) -> Result<String, CanonicalError> {
        Ok(v.to_string())
    }
    fn serialize_str(self, v: &str) -> Result<String, CanonicalError> {
        Ok(v.to_owned())
    }
    fn serialize_bytes(self, _v: &[u8]) -> Result<String, CanonicalError> {
        Err(key_refused())
    }
    fn serialize_none(self) -> Result<String, CanonicalError> {
        Err(key_refused())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, _value: &T) -> Result<String, CanonicalError> {
        Err(key_refused())
    }
    fn serialize_unit(self) -> Result<String, CanonicalError> {
        Err(key_refused())
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Result<String, CanonicalError> {
        Err(key_refused())
    }
    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<String, CanonicalError> {
        Ok(variant.to_owned())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<String, CanonicalError> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _value: &T,
    ) -> Result<String, CanonicalError> {
        Err(key_refused())
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<Self::SerializeSeq, CanonicalError> {
        Err(key_refused())
    }
    fn serialize_tuple(self, _len: usize) -> Result<Self::SerializeTuple, CanonicalError> {
        Err(key_refused())
    }
    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeTupleStruct, CanonicalError> {
        Err(key_refused())
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeTupleVariant, CanonicalError> {
        Err(key_refused())
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<Self::SerializeMap, CanonicalError> {
        Err(key_refused())
    }
    fn serialize_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeStruct, CanonicalError> {
        Err(key_refused())
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeStructVariant, CanonicalError> {
        Err(key_refused())
    }
}
