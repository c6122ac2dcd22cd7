//! Tracing payload types and checking JSON against their shapes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::*;

#[derive(Serialize, Deserialize)]
struct CloseOrder {
    order_id: u64,
    user_id: u32,
    reason: Option<String>,
    #[serde(default)]
    note: String,
}

fn shape<T: Serialize + DeserializeOwned>() -> PayloadShape {
    PayloadShape::of::<T>().expect("a shape")
}

fn refused(shape: &PayloadShape, v: serde_json::Value) -> String {
    shape.check(&v).expect_err("refused").to_string()
}

/// What the worker's decoding says of `v`, through the same path as a job: JSON value to
/// MessagePack by name, then `payload::decode`.
fn worker_takes<T: DeserializeOwned>(v: &serde_json::Value) -> bool {
    let bytes = crate::payload::encode(v, usize::MAX).unwrap();
    crate::payload::decode::<T>(&bytes).is_ok()
}

#[test]
fn a_struct_checks_types_and_required_fields() {
    let s = shape::<CloseOrder>();
    assert_eq!(s.check(&json!({"order_id": 7, "user_id": 1})), Ok(()));
    assert_eq!(
        s.check(&json!({"order_id": 7, "user_id": 1, "reason": null, "note": "n", "extra": [1]})),
        Ok(()),
        "optional and unknown fields"
    );
    assert_eq!(
        refused(&s, json!({"order_id": "seven", "user_id": 1})),
        "order_id: expected an unsigned integer, found a string"
    );
    assert_eq!(
        refused(&s, json!({"user_id": 1})),
        "order_id: missing required field"
    );
    assert_eq!(
        refused(&s, json!({"order_id": 7, "user_id": -1})),
        "user_id: expected an unsigned integer from 0 to 4294967295 (u32), found -1"
    );
    assert_eq!(
        refused(&s, json!({"order_id": 7.5, "user_id": 1})),
        "order_id: expected an unsigned integer, found the number 7.5"
    );
    assert_eq!(
        refused(&s, json!({"order_id": 7, "user_id": 1, "reason": 3})),
        "reason: expected a string, found an integer"
    );
    assert_eq!(
        refused(&s, json!("x")),
        "payload: expected an object, found a string"
    );
}

#[test]
fn nested_structs_sequences_maps_and_newtypes() {
    #[derive(Serialize, Deserialize)]
    struct Line {
        sku: String,
        qty: u16,
    }
    #[derive(Serialize, Deserialize)]
    struct UserId(u64);
    #[derive(Serialize, Deserialize)]
    struct Order {
        user: UserId,
        lines: Vec<Line>,
        tags: BTreeMap<String, i8>,
        pair: (bool, f64),
        grid: [u8; 2],
        letter: char,
    }
    let s = shape::<Order>();
    let good = json!({
        "user": 42, "lines": [{"sku": "a", "qty": 1}], "tags": {"x": -3},
        "pair": [true, 1], "grid": [1, 2], "letter": "z"
    });
    assert_eq!(s.check(&good), Ok(()));
    assert!(worker_takes::<Order>(&good));
    for (bad, why) in [
        (
            json!({"user": "u"}),
            "user: expected an unsigned integer, found a string",
        ),
        (
            json!({"lines": [{"sku": "a", "qty": 1}, {"sku": 5}]}),
            "lines[1].sku: expected a string, found an integer",
        ),
        (
            json!({"lines": [{"sku": "a"}]}),
            "lines[0].qty: missing required field",
        ),
        (json!({"tags": {"x": 300}}), "payload[\"x\"]"),
        (
            json!({"pair": [true]}),
            "pair: expected an array of 2 items, found an array",
        ),
        (
            json!({"grid": [1, 256]}),
            "grid[1]: expected an unsigned integer from 0 to 255 (u8), found 256",
        ),
        (
            json!({"letter": "ab"}),
            "letter: expected a string of one character, found a string",
        ),
    ] {
        let mut v = good.clone();
        for (k, x) in bad.as_object().unwrap() {
            v[k] = x.clone();
        }
        let got = refused(&s, v.clone());
        if why.starts_with("payload[") {
            assert!(got.starts_with("tags[\"x\"]"), "{got}");
        } else {
            assert_eq!(got, why);
        }
        assert!(!worker_takes::<Order>(&v), "the worker refuses {v} too");
    }
}

#[test]
fn enums_go_by_variant_name() {
    #[derive(Serialize, Deserialize)]
    enum Action {
        Close,
        Refund(u64),
        Move { from: u64, to: u64 },
    }
    #[derive(Serialize, Deserialize)]
    struct Job {
        action: Action,
    }
    let s = shape::<Job>();
    for ok in [
        json!({"action": "Close"}),
        json!({"action": {"Refund": 5}}),
        json!({"action": {"Move": {"from": 1, "to": 2}}}),
    ] {
        assert_eq!(s.check(&ok), Ok(()), "{ok}");
        assert!(worker_takes::<Job>(&ok), "{ok}");
    }
    for (bad, why) in [
        (
            json!({"action": {"Refund": "5"}}),
            "action.Refund: expected an unsigned integer, found a string",
        ),
        (
            json!({"action": {"Move": {"from": 1}}}),
            "action.Move.to: missing required field",
        ),
        (
            json!({"action": true}),
            "action: expected a variant name or a one-key object {\"Variant\": …} (one of `Close`, `Refund`, `Move`), found a boolean",
        ),
    ] {
        assert_eq!(refused(&s, bad.clone()), why);
        assert!(!worker_takes::<Job>(&bad), "{bad}");
    }
}

/// Variant aliases and `#[serde(other)]` do not show in a trace: a variant name the shape
/// does not list is taken, never refused.
#[test]
fn unlisted_variant_names_are_taken() {
    #[derive(Serialize, Deserialize)]
    enum State {
        #[serde(alias = "Shut")]
        Closed,
        Open(u8),
        #[serde(other)]
        Other,
    }
    let s = shape::<State>();
    for v in [
        json!("Shut"),
        json!("Whatever"),
        json!("Closed"),
        json!({"Open": 1}),
    ] {
        assert_eq!(s.check(&v), Ok(()), "{v}");
        assert!(worker_takes::<State>(&v), "{v}");
    }
    assert_eq!(
        refused(&s, json!({"Open": 300})),
        "Open: expected an unsigned integer from 0 to 255 (u8), found 300"
    );
    #[derive(Serialize, Deserialize)]
    #[serde(tag = "t", content = "c")]
    enum Adjacent {
        A(u64),
    }
    assert_eq!(PayloadShape::of::<Adjacent>(), None, "adjacently tagged");
}

#[test]
fn defaults_options_and_string_newtypes_are_not_required() {
    /// A Uuid-like id: a string as JSON, validated.
    #[derive(Serialize)]
    struct Id(String);
    impl<'de> Deserialize<'de> for Id {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Id, D::Error> {
            String::deserialize(d).map(Id)
        }
    }
    #[derive(Serialize, Deserialize, Default)]
    struct Meta {
        tenant: String,
    }
    #[derive(Serialize, Deserialize)]
    struct Payload {
        id: Id,
        #[serde(default)]
        meta: Meta,
        maybe: Option<Meta>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        list: Vec<u8>,
    }
    let s = shape::<Payload>();
    assert_eq!(s.check(&json!({"id": "abc"})), Ok(()));
    assert!(worker_takes::<Payload>(&json!({"id": "abc"})));
    assert_eq!(
        refused(&s, json!({"id": 5})),
        "id: expected a string, found an integer"
    );
    assert_eq!(refused(&s, json!({})), "id: missing required field");
    assert_eq!(
        refused(&s, json!({"id": "a", "meta": {}})),
        "meta.tenant: missing required field"
    );
    assert_eq!(s.check(&json!({"id": "a", "maybe": null})), Ok(()));
}

#[test]
fn a_struct_may_come_as_an_array_of_its_fields() {
    let s = shape::<CloseOrder>();
    let positional = json!([7, 1, null, "n"]);
    assert_eq!(s.check(&positional), Ok(()));
    assert!(worker_takes::<CloseOrder>(&positional));
    assert_eq!(
        refused(&s, json!(["7", 1])),
        "payload[0]: expected an unsigned integer, found a string"
    );
}

#[test]
fn aliases_and_renames_never_refuse_what_the_worker_takes() {
    #[derive(Serialize, Deserialize)]
    struct Aliased {
        #[serde(alias = "user_id")]
        customer_id: u64,
    }
    // Either there is no shape, or it takes the alias.
    if let Some(s) = PayloadShape::of::<Aliased>() {
        assert_eq!(s.check(&json!({"user_id": 5})), Ok(()));
        assert_eq!(s.check(&json!({"customer_id": 5})), Ok(()));
    }
    assert!(worker_takes::<Aliased>(&json!({"user_id": 5})));
    #[derive(Serialize, Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Camel {
        order_id: u64,
    }
    let s = shape::<Camel>();
    assert_eq!(s.check(&json!({"orderId": 1})), Ok(()));
    assert_eq!(
        refused(&s, json!({"order_id": 1})),
        "orderId: missing required field"
    );
    assert!(!worker_takes::<Camel>(&json!({"order_id": 1})));
    #[derive(Serialize, Deserialize)]
    struct OneWay {
        #[serde(rename(deserialize = "oid"))]
        order_id: u64,
    }
    assert_eq!(PayloadShape::of::<OneWay>(), None, "renamed one way only");
}

#[test]
fn types_tracing_cannot_see_have_no_shape() {
    #[derive(Serialize, Deserialize)]
    #[serde(tag = "kind")]
    enum Internal {
        A { x: u64 },
    }
    #[derive(Serialize, Deserialize)]
    #[serde(untagged)]
    enum Untagged {
        A(u64),
        B(String),
    }
    #[derive(Serialize, Deserialize)]
    struct Meta {
        tenant: String,
    }
    #[derive(Serialize, Deserialize)]
    struct Flat {
        id: u64,
        #[serde(flatten)]
        meta: Meta,
    }
    /// Validates: refuses the tracer's sample.
    #[derive(Serialize)]
    struct Email(String);
    impl<'de> Deserialize<'de> for Email {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Email, D::Error> {
            let s = String::deserialize(d)?;
            if s.contains('@') {
                Ok(Email(s))
            } else {
                Err(serde::de::Error::custom("not an email"))
            }
        }
    }
    #[derive(Serialize, Deserialize)]
    struct WithEmail {
        to: Email,
    }
    assert_eq!(PayloadShape::of::<Internal>(), None);
    assert_eq!(PayloadShape::of::<Untagged>(), None);
    assert_eq!(PayloadShape::of::<Flat>(), None);
    assert_eq!(PayloadShape::of::<WithEmail>(), None);
    assert_eq!(PayloadShape::of::<serde_json::Value>(), None);
}

#[test]
fn primitives_and_unit() {
    assert_eq!(shape::<u8>().check(&json!(255)), Ok(()));
    assert_eq!(
        refused(&shape::<u8>(), json!(256)),
        "payload: expected an unsigned integer from 0 to 255 (u8), found 256"
    );
    assert_eq!(shape::<i64>().check(&json!(-5)), Ok(()));
    assert!(shape::<i64>().check(&json!(u64::MAX)).is_err());
    assert_eq!(shape::<f32>().check(&json!(3)), Ok(()));
    assert!(worker_takes::<f32>(&json!(3)));
    assert_eq!(shape::<()>().check(&json!(null)), Ok(()));
    assert_eq!(shape::<bool>().check(&json!(false)), Ok(()));
    assert!(shape::<bool>().check(&json!(0)).is_err());
    assert_eq!(shape::<Option<u8>>().check(&json!(null)), Ok(()));
    assert_eq!(shape::<Vec<String>>().check(&json!(["a"])), Ok(()));
    assert!(shape::<Vec<String>>().check(&json!("a")).is_err());
}

#[test]
fn the_stored_form_round_trips_and_a_newer_version_is_not_read() {
    let s = shape::<CloseOrder>();
    let bytes = s.encode();
    assert!(
        bytes.starts_with(b"1|{"),
        "{}",
        String::from_utf8_lossy(&bytes)
    );
    assert_eq!(PayloadShape::decode(&bytes), Ok(s));
    assert_eq!(
        PayloadShape::decode(b"2|anything a newer dq writes"),
        Err(ShapeUnreadable::Newer(2))
    );
    assert!(matches!(
        PayloadShape::decode(b"1|{not json"),
        Err(ShapeUnreadable::Invalid(_))
    ));
    assert!(matches!(
        PayloadShape::decode(b"garbage"),
        Err(ShapeUnreadable::Invalid(_))
    ));
}

/// The stored data contract: format 1 as checked in is read back, and checks as it did.
#[test]
fn the_format_1_fixture_reads_back() {
    let bytes = include_bytes!("../../tests/fixtures/shape-format-1.txt");
    let bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let s = PayloadShape::decode(bytes).expect("format 1 reads");
    assert_eq!(s.check(&json!({"order_id": 7, "user_id": 1})), Ok(()));
    assert_eq!(
        s.check(&json!({"order_id": 7, "user_id": 1, "reason": "r", "note": "n"})),
        Ok(())
    );
    assert_eq!(
        refused(&s, json!({"order_id": "seven", "user_id": 1})),
        "order_id: expected an unsigned integer, found a string"
    );
    assert_eq!(
        refused(&s, json!({"order_id": 7})),
        "user_id: missing required field"
    );
    assert_eq!(
        refused(&s, json!({"order_id": 7, "user_id": 1, "reason": 5})),
        "reason: expected a string, found an integer"
    );
    assert_eq!(
        refused(&s, json!({"order_id": 7, "user_id": 4294967296u64})),
        "user_id: expected an unsigned integer from 0 to 4294967295 (u32), found 4294967296"
    );
}

/// Writes the fixture: `DQ_WRITE_SHAPE_FIXTURE=1 cargo test -p dq-core --lib write_shape_fixture`.
#[test]
fn write_shape_fixture() {
    if std::env::var_os("DQ_WRITE_SHAPE_FIXTURE").is_some() {
        let mut bytes = shape::<CloseOrder>().encode();
        bytes.push(b'\n');
        std::fs::write(
            concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/fixtures/shape-format-1.txt"
            ),
            bytes,
        )
        .unwrap();
    }
}

/// A set of flags read as names in a human-readable format and as its bits otherwise, as
/// `bitflags` does: the worker (MessagePack, not human-readable) reads the bits.
#[derive(Debug, PartialEq)]
struct Perms(u8);

impl Serialize for Perms {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            s.serialize_str(if self.0 == 0 { "" } else { "A" })
        } else {
            s.serialize_u8(self.0)
        }
    }
}

impl<'de> Deserialize<'de> for Perms {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Perms, D::Error> {
        if d.is_human_readable() {
            let text = String::deserialize(d)?;
            Ok(Perms(u8::from(!text.is_empty())))
        } else {
            u8::deserialize(d).map(Perms)
        }
    }
}

#[derive(Serialize, Deserialize)]
struct Grant {
    perms: Perms,
}

#[test]
fn a_type_that_reads_differently_when_not_human_readable_is_checked_as_the_worker_reads_it() {
    let s = shape::<Grant>();
    let bits = json!({"perms": 3});
    assert!(worker_takes::<Grant>(&bits));
    assert_eq!(s.check(&bits), Ok(()), "the bits, as the worker reads them");
    let names = json!({"perms": "A | B"});
    assert!(!worker_takes::<Grant>(&names));
    assert!(
        s.check(&names).is_err(),
        "names: the worker refuses them too"
    );
}

/// A struct whose own rule makes a field needed only with another: the field is not required
/// by the shape (only serde's `missing field` makes a field required).
#[derive(Serialize, Deserialize)]
#[serde(try_from = "RawPair")]
struct Pair {
    a: Option<u32>,
    b: Option<u32>,
}

#[derive(Serialize, Deserialize)]
struct RawPair {
    a: Option<u32>,
    b: Option<u32>,
}

impl TryFrom<RawPair> for Pair {
    type Error = String;
    fn try_from(r: RawPair) -> Result<Pair, String> {
        if r.a.is_some() && r.b.is_none() {
            return Err("b is needed with a".into());
        }
        Ok(Pair { a: r.a, b: r.b })
    }
}

#[test]
fn a_field_needed_by_a_types_own_rule_is_not_required() {
    let s = shape::<Pair>();
    let empty = json!({});
    assert!(worker_takes::<Pair>(&empty));
    assert_eq!(s.check(&empty), Ok(()));
    assert!(
        s.check(&json!({"a": "x"})).is_err(),
        "types are still checked"
    );
}
