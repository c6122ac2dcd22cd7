//! Payload encoding: typed values to MessagePack bytes and back, fields by name, with a size
//! limit.
//!
//! # Encoding: fields by name
//!
//! A payload is MessagePack with every struct (nested ones too) written as a map from field
//! name to value (`rmp_serde::to_vec_named`). Decoding then goes by name, as serde users
//! expect, so a job enqueued by one version of a payload type is read by the next:
//!
//! | change to the payload type | a job stored before it |
//! |---|---|
//! | reorder fields | decodes (by name) |
//! | add a field with `#[serde(default)]`, or an `Option` field | decodes (the default / `None`) |
//! | remove a field | decodes (the stored value is skipped), unless `#[serde(deny_unknown_fields)]` |
//! | rename a field with `#[serde(alias = "old")]` (or `rename` back to the stored name) | decodes |
//! | reorder or add enum variants | decodes: variants go by name |
//! | remove or rename an enum variant a stored job uses | **fails**: `unknown variant` |
//! | add a field without a default | **fails**: ``missing field `name` `` |
//! | change a field's type (`u64` → `String`) | **fails**: `invalid type` |
//! | rename a field without an alias | **fails**: `missing field` for the new name |
//!
//! A failure is never a wrong value: the handler is not called, the attempt fails permanently
//! and the job goes to the dead queue with an error naming the type and the field
//! (``undecodable payload: does not fit app::CloseOrder: missing field `user_id` ``). Deploy a
//! fixed type, then requeue the dead jobs (`dq dead requeue`, `TopicClient::requeue_dead`).
//!
//! Tuples and tuple structs have no field names: they stay positional (a MessagePack array),
//! so only appending is safe there (and only with a default). Newtype structs are their inner
//! value; `#[serde(flatten)]` and internally tagged enums (`#[serde(tag = "…")]`) are maps
//! whatever the encoding.
//!
//! # Payloads stored positionally
//!
//! Earlier dq releases wrote structs as arrays, by position (`rmp_serde::to_vec`). Those
//! payloads still decode: serde's derived `Deserialize` accepts a struct as an array or a
//! map, so nothing needs migrating. But an array carries no names, so a positional job is
//! read by field order: **reordering two fields of the same type before such jobs are
//! drained swaps their values**. Other changes fail safely on them (dead, with the error):
//! a removed field leaves an element over, an added field must come last with
//! `#[serde(default)]` (an `Option` alone is not enough), a renamed one is fine (names are
//! not stored). Change the
//! order of fields only once the jobs enqueued by the old dq have run.
//!
//! Named payloads cost bytes: each field name is stored once per job (the benchmark's
//! five-field, ~100-byte order: see dq-bench's S2 rows). dq offers no positional option: the
//! bytes saved do not pay for a deploy that silently swaps values.

use serde::{Serialize, de::DeserializeOwned};

use crate::error::{Error, Result};

/// Default largest encoded payload: 1 MiB.
pub const DEFAULT_MAX_PAYLOAD: usize = 1024 * 1024;

/// Encodes a payload as MessagePack with struct fields by name, refusing one over `limit`
/// bytes.
pub fn encode<T: Serialize + ?Sized>(value: &T, limit: usize) -> Result<Vec<u8>> {
    let bytes = rmp_serde::to_vec_named(value).map_err(|e| Error::Encode(e.to_string()))?;
    check_size(&bytes, limit)?;
    Ok(bytes)
}

/// Refuses raw payload bytes over `limit`.
pub fn check_size(bytes: &[u8], limit: usize) -> Result<()> {
    if bytes.len() > limit {
        return Err(Error::PayloadTooLarge {
            size: bytes.len(),
            limit,
        });
    }
    Ok(())
}

/// Decodes a MessagePack payload into the handler's type, by field name (or by position, for
/// a payload stored before dq wrote names), past the trace context a producer with the
/// `otel` feature may have stored in front of it (see [`crate::trace`]).
///
/// A payload that does not fit `T` is [`Error::Decode`] naming the type and serde's reason:
/// ``does not fit app::CloseOrder: missing field `user_id` ``.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T> {
    let (_, bytes) = crate::trace::split(bytes);
    rmp_serde::from_slice(bytes)
        .map_err(|e| Error::Decode(format!("does not fit {}: {e}", std::any::type_name::<T>())))
}

/// Whether `stored` holds the value `named` holds, `stored` being either the same bytes or the
/// positional form an earlier dq wrote (every struct an array of its field values, in order):
/// for a value stored by that dq (a periodic schedule's payload) that the new encoding writes
/// again, so that it is recognised as the same and nothing is reset.
///
/// Conservative: a map with string keys in `named` is read as a struct, so a payload holding
/// a real string-keyed map (which the positional encoding also wrote as a map) is never
/// found the same — the caller then treats it as changed, as before.
pub(crate) fn same_value(stored: &[u8], named: &[u8]) -> bool {
    if stored == named {
        return true;
    }
    match (
        rmp_serde::from_slice::<Value>(stored),
        rmp_serde::from_slice::<Value>(named),
    ) {
        (Ok(stored), Ok(named)) => stored == named.positional(),
        _ => false,
    }
}

/// A MessagePack value, as far as [`same_value`] compares them (extension types are not
/// read: such payloads are never found the same).
#[derive(Debug, PartialEq)]
enum Value {
    Nil,
    Bool(bool),
    /// Every integer that fits, whichever marker and sign wrote it.
    Unsigned(u64),
    Negative(i64),
    Float(f64),
    Text(String),
    Bytes(Vec<u8>),
    Array(Vec<Value>),
    Map(Vec<(Value, Value)>),
}

impl Value {
    /// The value as the positional encoding wrote it: every map whose keys are all text (a
    /// struct, as named) becomes the array of its values, in order.
    fn positional(self) -> Value {
        match self {
            Value::Array(items) => Value::Array(items.into_iter().map(Value::positional).collect()),
            Value::Map(entries) if entries.iter().all(|(k, _)| matches!(k, Value::Text(_))) => {
                Value::Array(entries.into_iter().map(|(_, v)| v.positional()).collect())
            }
            Value::Map(entries) => Value::Map(
                entries
                    .into_iter()
                    .map(|(k, v)| (k.positional(), v.positional()))
                    .collect(),
            ),
            other => other,
        }
    }
}

impl<'de> serde::Deserialize<'de> for Value {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Value, D::Error> {
        d.deserialize_any(ValueVisitor)
    }
}

struct ValueVisitor;

impl<'de> serde::de::Visitor<'de> for ValueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a MessagePack value")
    }

    fn visit_unit<E>(self) -> std::result::Result<Value, E> {
        Ok(Value::Nil)
    }

    fn visit_none<E>(self) -> std::result::Result<Value, E> {
        Ok(Value::Nil)
    }

    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> std::result::Result<Value, D::Error> {
        serde::Deserialize::deserialize(d)
    }

    fn visit_bool<E>(self, v: bool) -> std::result::Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_u64<E>(self, v: u64) -> std::result::Result<Value, E> {
        Ok(Value::Unsigned(v))
    }

    fn visit_i64<E>(self, v: i64) -> std::result::Result<Value, E> {
        Ok(u64::try_from(v).map_or(Value::Negative(v), Value::Unsigned))
    }

    fn visit_f64<E>(self, v: f64) -> std::result::Result<Value, E> {
        Ok(Value::Float(v))
    }

    fn visit_str<E>(self, v: &str) -> std::result::Result<Value, E> {
        Ok(Value::Text(v.to_owned()))
    }

    fn visit_bytes<E>(self, v: &[u8]) -> std::result::Result<Value, E> {
        Ok(Value::Bytes(v.to_vec()))
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(
        self,
        mut seq: A,
    ) -> std::result::Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(
        self,
        mut map: A,
    ) -> std::result::Result<Value, A::Error> {
        let mut entries = Vec::new();
        while let Some(entry) = map.next_entry()? {
            entries.push(entry);
        }
        Ok(Value::Map(entries))
    }
}

#[cfg(test)]
mod tests {
    //! What rmp-serde 1.3 does with each shape of payload, named and positional: the rules
    //! the module docs promise.

    use std::collections::BTreeMap;

    use serde::{Deserialize, Serialize};

    use super::*;

    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct Order {
        id: u64,
        note: String,
    }

    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct CloseOrder {
        order_id: u64,
        user_id: u64,
    }

    /// Today's way of storing a payload, before fields by name.
    fn positional<T: Serialize>(value: &T) -> Vec<u8> {
        rmp_serde::to_vec(value).unwrap()
    }

    fn named<T: Serialize>(value: &T) -> Vec<u8> {
        encode(value, DEFAULT_MAX_PAYLOAD).unwrap()
    }

    fn decode_err<T: DeserializeOwned + std::fmt::Debug>(bytes: &[u8]) -> String {
        match decode::<T>(bytes) {
            Err(Error::Decode(why)) => why,
            other => panic!("expected a decode error, got {other:?}"),
        }
    }

    #[test]
    fn round_trip_and_limit() {
        let o = Order {
            id: 7,
            note: "x".into(),
        };
        let bytes = encode(&o, 100).unwrap();
        assert_eq!(decode::<Order>(&bytes).unwrap(), o);
        let big = Order {
            id: 1,
            note: "y".repeat(200),
        };
        assert!(matches!(
            encode(&big, 100),
            Err(Error::PayloadTooLarge { limit: 100, .. })
        ));
        assert!(matches!(
            decode::<Order>(b"\xc1garbage"),
            Err(Error::Decode(_))
        ));
    }

    #[test]
    fn structs_are_written_as_maps_of_field_names() {
        let bytes = named(&CloseOrder {
            order_id: 7,
            user_id: 42,
        });
        let as_map: BTreeMap<String, u64> = rmp_serde::from_slice(&bytes).unwrap();
        assert_eq!(
            as_map,
            BTreeMap::from([("order_id".into(), 7), ("user_id".into(), 42)])
        );
        // Positional bytes are an array: no name in them.
        assert_eq!(
            positional(&CloseOrder {
                order_id: 7,
                user_id: 42
            })[0],
            0x92
        );
        assert_eq!(bytes[0], 0x82, "a two-entry map");
    }

    #[test]
    fn positional_payloads_stored_before_still_decode() {
        let o = Order {
            id: 7,
            note: "x".into(),
        };
        assert_eq!(decode::<Order>(&positional(&o)).unwrap(), o);
    }

    #[test]
    fn reordered_fields_decode_by_name() {
        #[derive(Deserialize, Debug, PartialEq)]
        struct Reordered {
            user_id: u64,
            order_id: u64,
        }
        let bytes = named(&CloseOrder {
            order_id: 7,
            user_id: 42,
        });
        assert_eq!(
            decode::<Reordered>(&bytes).unwrap(),
            Reordered {
                user_id: 42,
                order_id: 7
            }
        );
        // The hazard the docs name: a positional job read by a reordered type swaps values.
        let old = positional(&CloseOrder {
            order_id: 7,
            user_id: 42,
        });
        assert_eq!(
            decode::<Reordered>(&old).unwrap(),
            Reordered {
                user_id: 7,
                order_id: 42
            }
        );
    }

    #[test]
    fn added_fields_with_a_default_or_optional_decode() {
        #[derive(Deserialize, Debug, PartialEq)]
        struct Added {
            order_id: u64,
            user_id: u64,
            #[serde(default)]
            reason: String,
            note: Option<String>,
        }
        let want = Added {
            order_id: 7,
            user_id: 42,
            reason: String::new(),
            note: None,
        };
        let v1 = CloseOrder {
            order_id: 7,
            user_id: 42,
        };
        assert_eq!(decode::<Added>(&named(&v1)).unwrap(), want);
        // Positional: a missing trailing element takes a `#[serde(default)]`, but an `Option`
        // without one is refused (no wrong value either way).
        #[derive(Deserialize, Debug, PartialEq)]
        struct Defaulted {
            order_id: u64,
            user_id: u64,
            #[serde(default)]
            reason: String,
        }
        assert_eq!(
            decode::<Defaulted>(&positional(&v1)).unwrap(),
            Defaulted {
                order_id: 7,
                user_id: 42,
                reason: String::new()
            }
        );
        assert!(decode_err::<Added>(&positional(&v1)).contains("invalid length"));
    }

    #[test]
    fn a_field_added_without_a_default_names_the_type_and_the_field() {
        #[derive(Deserialize, Debug)]
        #[allow(dead_code)]
        struct Added {
            order_id: u64,
            user_id: u64,
            reason: String,
        }
        let why = decode_err::<Added>(&named(&CloseOrder {
            order_id: 7,
            user_id: 42,
        }));
        assert!(why.contains("Added"), "{why}");
        assert!(why.contains("missing field `reason`"), "{why}");
        assert!(
            why.starts_with("does not fit dq_core::payload::tests::"),
            "{why}"
        );
    }

    #[test]
    fn removed_fields_are_skipped_unless_unknown_fields_are_denied() {
        #[derive(Deserialize, Debug, PartialEq)]
        struct Removed {
            order_id: u64,
        }
        #[derive(Deserialize, Debug)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Strict {
            order_id: u64,
        }
        let v1 = CloseOrder {
            order_id: 7,
            user_id: 42,
        };
        assert_eq!(
            decode::<Removed>(&named(&v1)).unwrap(),
            Removed { order_id: 7 }
        );
        assert!(decode_err::<Strict>(&named(&v1)).contains("unknown field `user_id`"));
        // Positional: the trailing element is left over, and rmp-serde refuses it.
        assert!(decode::<Removed>(&positional(&v1)).is_err());
    }

    #[test]
    fn renamed_fields_decode_with_an_alias_or_a_rename() {
        #[derive(Deserialize, Debug, PartialEq)]
        struct Aliased {
            order_id: u64,
            #[serde(alias = "user_id")]
            customer_id: u64,
        }
        #[derive(Deserialize, Debug, PartialEq)]
        struct Renamed {
            order_id: u64,
            #[serde(rename = "user_id")]
            customer: u64,
        }
        #[derive(Deserialize, Debug)]
        #[allow(dead_code)]
        struct Bare {
            order_id: u64,
            customer_id: u64,
        }
        let v1 = named(&CloseOrder {
            order_id: 7,
            user_id: 42,
        });
        assert_eq!(
            decode::<Aliased>(&v1).unwrap(),
            Aliased {
                order_id: 7,
                customer_id: 42
            }
        );
        assert_eq!(
            decode::<Renamed>(&v1).unwrap(),
            Renamed {
                order_id: 7,
                customer: 42
            }
        );
        assert!(decode_err::<Bare>(&v1).contains("missing field `customer_id`"));
    }

    #[test]
    fn a_changed_type_is_refused_not_misread() {
        #[derive(Deserialize, Debug)]
        #[allow(dead_code)]
        struct Changed {
            order_id: String,
            user_id: u64,
        }
        let why = decode_err::<Changed>(&named(&CloseOrder {
            order_id: 7,
            user_id: 42,
        }));
        assert!(
            why.contains("Changed") && why.contains("invalid type"),
            "{why}"
        );
    }

    #[test]
    fn nested_structs_are_named_all_the_way_down() {
        #[derive(Serialize, Deserialize, Debug, PartialEq)]
        struct Outer {
            order: CloseOrder,
            lines: Vec<Order>,
        }
        #[derive(Deserialize, Debug, PartialEq)]
        struct InnerReordered {
            user_id: u64,
            order_id: u64,
        }
        #[derive(Deserialize, Debug, PartialEq)]
        struct OuterReordered {
            lines: Vec<Order>,
            order: InnerReordered,
        }
        let v1 = Outer {
            order: CloseOrder {
                order_id: 7,
                user_id: 42,
            },
            lines: vec![Order {
                id: 1,
                note: "n".into(),
            }],
        };
        let got = decode::<OuterReordered>(&named(&v1)).unwrap();
        assert_eq!(
            got.order,
            InnerReordered {
                user_id: 42,
                order_id: 7
            }
        );
        assert_eq!(got.lines, v1.lines);
        assert_eq!(decode::<Outer>(&positional(&v1)).unwrap(), v1);
    }

    #[test]
    fn enums_go_by_variant_name() {
        #[derive(Serialize, Deserialize, Debug, PartialEq)]
        enum Action {
            Close,
            Refund(u64),
            Move { from: u64, to: u64 },
        }
        #[derive(Deserialize, Debug, PartialEq)]
        enum Reordered {
            Move { to: u64, from: u64 },
            Hold,
            Refund(u64),
            Close,
        }
        for (v1, v2) in [
            (Action::Close, Reordered::Close),
            (Action::Refund(5), Reordered::Refund(5)),
            (
                Action::Move { from: 1, to: 2 },
                Reordered::Move { to: 2, from: 1 },
            ),
        ] {
            assert_eq!(decode::<Reordered>(&named(&v1)).unwrap(), v2);
            assert_eq!(decode::<Action>(&positional(&v1)).unwrap(), v1);
        }
        // A unit variant is its name; a removed variant is refused, naming it.
        assert_eq!(named(&Action::Close), rmp_serde::to_vec("Close").unwrap());
        #[derive(Deserialize, Debug)]
        enum Fewer {
            Refund(#[allow(dead_code)] u64),
        }
        assert!(decode_err::<Fewer>(&named(&Action::Close)).contains("unknown variant `Close`"));
    }

    #[test]
    fn options_tuples_and_newtypes_keep_their_shape() {
        #[derive(Serialize, Deserialize, Debug, PartialEq)]
        struct UserId(u64);
        #[derive(Serialize, Deserialize, Debug, PartialEq)]
        struct Pair(u64, String);
        #[derive(Serialize, Deserialize, Debug, PartialEq)]
        struct Shapes {
            user: UserId,
            pair: Pair,
            tuple: (u8, bool),
            maybe: Option<u64>,
        }
        let v = Shapes {
            user: UserId(42),
            pair: Pair(1, "a".into()),
            tuple: (3, true),
            maybe: None,
        };
        let bytes = named(&v);
        assert_eq!(decode::<Shapes>(&bytes).unwrap(), v);
        assert_eq!(decode::<Shapes>(&positional(&v)).unwrap(), v);
        // A newtype is its inner value; tuples stay arrays (no names to go by).
        assert_eq!(named(&UserId(42)), named(&42u64));
        assert_eq!(
            named(&Pair(1, "a".into())),
            positional(&Pair(1, "a".into()))
        );
        #[derive(Deserialize, Debug, PartialEq)]
        struct Longer(u64, String, #[serde(default)] u8);
        assert_eq!(
            decode::<Longer>(&named(&Pair(1, "a".into()))).unwrap(),
            Longer(1, "a".into(), 0)
        );
    }

    #[test]
    fn flattened_and_internally_tagged_payloads_decode_both_ways() {
        #[derive(Serialize, Deserialize, Debug, PartialEq)]
        struct Meta {
            tenant: String,
        }
        #[derive(Serialize, Deserialize, Debug, PartialEq)]
        struct Flat {
            id: u64,
            #[serde(flatten)]
            meta: Meta,
        }
        #[derive(Serialize, Deserialize, Debug, PartialEq)]
        #[serde(tag = "kind")]
        enum Event {
            Close { order_id: u64 },
            Ping,
        }
        let flat = Flat {
            id: 1,
            meta: Meta { tenant: "t".into() },
        };
        // Flatten writes a map whatever the encoding.
        assert_eq!(named(&flat), positional(&flat));
        assert_eq!(decode::<Flat>(&named(&flat)).unwrap(), flat);
        for e in [Event::Close { order_id: 7 }, Event::Ping] {
            assert_eq!(decode::<Event>(&named(&e)).unwrap(), e);
            assert_eq!(decode::<Event>(&positional(&e)).unwrap(), e);
        }
    }

    #[test]
    fn skipped_fields_are_safe_by_name_only() {
        #[derive(Serialize, Deserialize, Debug, PartialEq)]
        struct Sparse {
            #[serde(default, skip_serializing_if = "Option::is_none")]
            note: Option<String>,
            id: u64,
        }
        let v = Sparse { note: None, id: 7 };
        assert_eq!(decode::<Sparse>(&named(&v)).unwrap(), v);
        // Positionally the skipped field shifts `id` into `note`'s place.
        assert!(decode::<Sparse>(&positional(&v)).is_err());
    }

    #[test]
    fn a_positional_payload_is_the_same_value_as_its_named_form() {
        #[derive(Serialize)]
        struct Report {
            kind: String,
            days: u8,
            offset: i32,
            scale: f32,
            inner: Order,
            tags: Vec<Option<u64>>,
            raw: (u8, String),
        }
        let report = Report {
            kind: "nightly".into(),
            days: 7,
            offset: -3,
            scale: 0.5,
            inner: Order {
                id: 300,
                note: "n".into(),
            },
            tags: vec![Some(1), None],
            raw: (9, "r".into()),
        };
        let stored = named(&report);
        assert!(same_value(&positional(&report), &stored));
        assert!(same_value(&stored, &stored));
        // Another value, or the fields in another order, is not the same.
        let other = Report { days: 8, ..report };
        assert!(!same_value(&positional(&other), &stored));
        let swapped = positional(&CloseOrder {
            order_id: 42,
            user_id: 7,
        });
        assert!(!same_value(
            &swapped,
            &super::encode(
                &CloseOrder {
                    order_id: 7,
                    user_id: 42
                },
                100
            )
            .unwrap()
        ));
        // A struct holding a real string-keyed map is not found the same (conservative: the
        // map reads as a struct), nor is garbage.
        #[derive(Serialize)]
        struct WithMap {
            counts: BTreeMap<String, u64>,
            n: u64,
        }
        let with_map = WithMap {
            counts: BTreeMap::from([("a".to_owned(), 1)]),
            n: 5,
        };
        assert!(!same_value(&positional(&with_map), &named(&with_map)));
        assert!(!same_value(b"\xc1", &stored));
    }

    #[test]
    fn a_trace_envelope_is_stripped_before_decoding() {
        let o = Order {
            id: 7,
            note: "x".into(),
        };
        let wrapped = crate::trace::wrap("00-trace", named(&o));
        assert_eq!(decode::<Order>(&wrapped).unwrap(), o);
    }
}
