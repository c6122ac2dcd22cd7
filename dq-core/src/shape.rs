//! Payload shapes: what a handler's payload type looks like as JSON, so that a process without
//! the type (`dq serve`, in another binary than the workers) can refuse a JSON payload the
//! worker could not decode, before it is stored.
//!
//! A worker publishes the shape of each handler's payload when it starts
//! ([`Catalog::put_payload_shape`](crate::store::Catalog::put_payload_shape)); the HTTP API
//! reads it and [`PayloadShape::check`]s a request's payload against it.
//!
//! # How a shape is found
//!
//! [`PayloadShape::of`] traces the type's `Deserialize` with `serde-reflection` as a format
//! that is not human-readable, as dq's MessagePack decoding is not (`rmp-serde`'s default: a
//! type that reads differently in the two modes, a `bitflags` set say, is traced as the worker
//! reads it). Tracing also gives sample values; each is taken as the JSON an HTTP client would
//! send for it (its MessagePack read back as JSON), and must decode back through exactly the
//! path a payload from `dq serve` takes (JSON → MessagePack by field name → the worker's
//! decoding), or there is no shape. A struct field is *required* when the sample without it
//! fails that decoding with serde's ``missing field `name` `` error (an `Option` or
//! `#[serde(default)]` field does not; a type whose own rules fail for another reason does not
//! make the field required).
//!
//! There is **no shape** (every payload is taken, as before) whenever that is uncertain: a type
//! `serde-reflection` cannot trace (`#[serde(flatten)]`, internally tagged or untagged enums,
//! a `Deserialize` that validates its input or reads anything self-described), or a sample
//! that does not survive a JSON round trip (fields renamed one way only).
//!
//! # What a check refuses
//!
//! Only what the worker's decoding would certainly refuse: a wrong JSON type (a string where
//! an integer goes), an integer out of its type's range or a number with a fraction for an
//! integer, a missing required struct field, a known enum variant with content that does not
//! fit. Unknown fields are taken (serde skips them), and so are enum variant names the shape
//! does not list (tracing does not show a variant's aliases nor a `#[serde(other)]` variant),
//! and anything else the check cannot be sure of.
//!
//! # Stored form (format 1)
//!
//! `1|` followed by the shape as JSON ([`PayloadShape::encode`]). A reader meeting another
//! version reads no shape ([`ShapeUnreadable::Newer`]): a newer dq's shape is never an error,
//! only no check. The fixture `dq-core/tests/fixtures/shape-format-1.txt` pins format 1.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_reflection::{ContainerFormat, Format, Named, Registry, VariantFormat};

/// The version of the stored form [`PayloadShape::encode`] writes.
pub const SHAPE_FORMAT: u32 = 1;

/// How deep a check follows a payload (serde_json parses at most 128 levels anyway).
const MAX_DEPTH: usize = 256;

/// The JSON shape of a payload type: what [`PayloadShape::check`] holds a JSON payload to.
/// Built by [`PayloadShape::of`] (a worker, from its handler's type) or read from the store
/// ([`PayloadShape::decode`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PayloadShape {
    root: Shape,
    /// The named types (structs and enums) `root` refers to, by serde name.
    types: BTreeMap<String, TypeShape>,
}

/// One value's shape.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Shape {
    /// Anything (a shape the check does not know).
    Any,
    /// `null` (`()`).
    Unit,
    /// `true` or `false`.
    Bool,
    /// An integer of `bits` bits, signed or not.
    Int { signed: bool, bits: u8 },
    /// Any number.
    Float,
    /// A string of one character.
    Char,
    /// A string.
    Str,
    /// Bytes: an array of integers or a string (taken leniently).
    Bytes,
    /// `null` or the inner shape.
    Option(Box<Shape>),
    /// An array of the inner shape.
    Seq(Box<Shape>),
    /// An object whose values have the inner shape.
    Map(Box<Shape>),
    /// An array of these shapes, in order.
    Tuple(Vec<Shape>),
    /// An array of `len` items of one shape.
    Array { item: Box<Shape>, len: usize },
    /// A named type of [`PayloadShape::types`].
    Named(String),
}

/// A named type's shape.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum TypeShape {
    /// `struct A;`
    UnitStruct,
    /// `struct A(T);`: the inner value.
    Newtype(Shape),
    /// `struct A(T, U);`: an array.
    TupleStruct(Vec<Shape>),
    /// `struct A { … }`: an object by field name (or an array, by position).
    Struct(Vec<Field>),
    /// An externally tagged enum: a unit variant's name, or `{"Variant": content}`.
    Enum(Vec<Variant>),
}

/// A struct's field.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Field {
    name: String,
    shape: Shape,
    /// Known to be needed: the payload is refused without it.
    required: bool,
}

/// An enum's variant.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Variant {
    name: String,
    content: Content,
}

/// What a variant holds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Content {
    Unit,
    Newtype(Shape),
    Tuple(Vec<Shape>),
    Struct(Vec<Field>),
}

/// Why a JSON payload does not fit a shape: where (`order_id`, `lines[2].sku`; `payload` for
/// the whole value) and what was expected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// The JSON path of the value that does not fit.
    pub path: String,
    /// What is wrong with it: `expected an unsigned integer, found a string`.
    pub problem: String,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.problem)
    }
}

impl std::error::Error for Mismatch {}

/// Why stored shape bytes are not read (the caller then checks nothing).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ShapeUnreadable {
    /// Written in a format this dq does not know (a newer dq's).
    Newer(u32),
    /// Not a shape of a format this dq knows.
    Invalid(String),
}

impl fmt::Display for ShapeUnreadable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShapeUnreadable::Newer(v) => write!(
                f,
                "payload shape of format {v}, newer than this dq reads ({SHAPE_FORMAT})"
            ),
            ShapeUnreadable::Invalid(why) => write!(f, "unreadable payload shape: {why}"),
        }
    }
}

impl std::error::Error for ShapeUnreadable {}

/// The shape of `T`, or `None` where it cannot be known for sure (see the module docs). For
/// `#[delayed_job]`'s descriptor ([`crate::JobDescriptor::shape`]).
pub fn of<T: Serialize + DeserializeOwned>() -> Option<PayloadShape> {
    PayloadShape::of::<T>()
}

impl PayloadShape {
    /// The shape of `T`, or `None` where it cannot be known for sure (see the module docs).
    /// Never panics: a type whose tracing panics has no shape.
    pub fn of<T: Serialize + DeserializeOwned>() -> Option<PayloadShape> {
        std::panic::catch_unwind(trace::<T>).ok().flatten()
    }

    /// Checks a JSON payload against the shape: `Err` only for a payload the worker's
    /// decoding would certainly refuse, naming the first place that does not fit.
    pub fn check(&self, value: &Value) -> Result<(), Mismatch> {
        let mut path = String::new();
        self.check_at(&self.root, value, &mut path, 0)
    }

    /// The stored form: `1|` and the shape as JSON.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = format!("{SHAPE_FORMAT}|").into_bytes();
        // A tree of strings, vectors and maps with string keys: always serialisable.
        out.extend(serde_json::to_vec(self).unwrap_or_default());
        out
    }

    /// Reads the stored form back: [`ShapeUnreadable::Newer`] for another format version,
    /// [`ShapeUnreadable::Invalid`] for bytes that are not a shape.
    pub fn decode(bytes: &[u8]) -> Result<PayloadShape, ShapeUnreadable> {
        let bar = bytes
            .iter()
            .position(|b| *b == b'|')
            .ok_or_else(|| ShapeUnreadable::Invalid("no format version".into()))?;
        let version: u32 = std::str::from_utf8(&bytes[..bar])
            .ok()
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| ShapeUnreadable::Invalid("no format version".into()))?;
        if version != SHAPE_FORMAT {
            return Err(ShapeUnreadable::Newer(version));
        }
        serde_json::from_slice(&bytes[bar + 1..])
            .map_err(|e| ShapeUnreadable::Invalid(e.to_string()))
    }

    fn check_at(
        &self,
        shape: &Shape,
        v: &Value,
        path: &mut String,
        depth: usize,
    ) -> Result<(), Mismatch> {
        if depth > MAX_DEPTH {
            return Ok(());
        }
        let wrong = |path: &String, expected: &str| {
            Err(Mismatch {
                path: shown(path),
                problem: format!("expected {expected}, found {}", found(v)),
            })
        };
        match shape {
            Shape::Any => Ok(()),
            Shape::Unit => match v {
                Value::Null => Ok(()),
                _ => wrong(path, "null"),
            },
            Shape::Bool => match v {
                Value::Bool(_) => Ok(()),
                _ => wrong(path, "true or false"),
            },
            Shape::Int { signed, bits } => check_int(*signed, *bits, v, path),
            Shape::Float => match v {
                Value::Number(_) => Ok(()),
                _ => wrong(path, "a number"),
            },
            Shape::Char => match v {
                Value::String(s) if s.chars().count() == 1 => Ok(()),
                _ => wrong(path, "a string of one character"),
            },
            Shape::Str => match v {
                Value::String(_) => Ok(()),
                _ => wrong(path, "a string"),
            },
            Shape::Bytes => match v {
                Value::String(_) | Value::Array(_) => Ok(()),
                _ => wrong(path, "bytes (an array of integers)"),
            },
            Shape::Option(inner) => match v {
                Value::Null => Ok(()),
                _ => self.check_at(inner, v, path, depth + 1),
            },
            Shape::Seq(item) => match v {
                Value::Array(items) => {
                    self.check_items(items.iter().map(|i| (item.as_ref(), i)), path, depth)
                }
                _ => wrong(path, "an array"),
            },
            Shape::Map(value) => match v {
                Value::Object(entries) => {
                    for (k, e) in entries {
                        let len = path.len();
                        path.push_str(&format!("[{k:?}]"));
                        self.check_at(value, e, path, depth + 1)?;
                        path.truncate(len);
                    }
                    Ok(())
                }
                _ => wrong(path, "an object"),
            },
            Shape::Tuple(shapes) => self.check_tuple(shapes, v, path, depth),
            Shape::Array { item, len } => match v {
                Value::Array(items) if items.len() < *len => {
                    wrong(path, &format!("an array of {len} items"))
                }
                Value::Array(items) => {
                    self.check_items(items.iter().map(|i| (item.as_ref(), i)), path, depth)
                }
                _ => wrong(path, &format!("an array of {len} items")),
            },
            Shape::Named(name) => match self.types.get(name) {
                None => Ok(()),
                Some(t) => self.check_type(t, v, path, depth),
            },
        }
    }

    /// Checks the items of an array, each against its shape.
    fn check_items<'a>(
        &self,
        items: impl Iterator<Item = (&'a Shape, &'a Value)>,
        path: &mut String,
        depth: usize,
    ) -> Result<(), Mismatch> {
        for (i, (shape, item)) in items.enumerate() {
            let len = path.len();
            path.push_str(&format!("[{i}]"));
            self.check_at(shape, item, path, depth + 1)?;
            path.truncate(len);
        }
        Ok(())
    }

    /// A tuple: an array of at least as many items (serde refuses fewer; more are taken,
    /// not being sure).
    fn check_tuple(
        &self,
        shapes: &[Shape],
        v: &Value,
        path: &mut String,
        depth: usize,
    ) -> Result<(), Mismatch> {
        match v {
            Value::Array(items) if items.len() >= shapes.len() => {
                self.check_items(shapes.iter().zip(items), path, depth)
            }
            _ => Err(Mismatch {
                path: shown(path),
                problem: format!(
                    "expected an array of {} items, found {}",
                    shapes.len(),
                    found(v)
                ),
            }),
        }
    }

    fn check_type(
        &self,
        t: &TypeShape,
        v: &Value,
        path: &mut String,
        depth: usize,
    ) -> Result<(), Mismatch> {
        match t {
            // MessagePack's unit struct is `nil` or `[]`: not worth refusing anything.
            TypeShape::UnitStruct => Ok(()),
            TypeShape::Newtype(inner) => self.check_at(inner, v, path, depth + 1),
            // Fields with `#[serde(default)]` may be left off the end: only the items
            // given are checked.
            TypeShape::TupleStruct(shapes) => match v {
                Value::Array(items) => self.check_items(shapes.iter().zip(items), path, depth),
                _ => Err(Mismatch {
                    path: shown(path),
                    problem: format!("expected an array, found {}", found(v)),
                }),
            },
            TypeShape::Struct(fields) => self.check_struct(fields, v, path, depth),
            TypeShape::Enum(variants) => self.check_enum(variants, v, path, depth),
        }
    }

    fn check_struct(
        &self,
        fields: &[Field],
        v: &Value,
        path: &mut String,
        depth: usize,
    ) -> Result<(), Mismatch> {
        match v {
            Value::Object(entries) => {
                for f in fields {
                    let len = path.len();
                    push_field(path, &f.name);
                    match entries.get(&f.name) {
                        Some(e) => self.check_at(&f.shape, e, path, depth + 1)?,
                        None if f.required => {
                            return Err(Mismatch {
                                path: shown(path),
                                problem: "missing required field".into(),
                            });
                        }
                        None => {}
                    }
                    path.truncate(len);
                }
                Ok(())
            }
            // serde also takes a struct as an array of its fields, in order.
            Value::Array(items) => {
                self.check_items(fields.iter().map(|f| &f.shape).zip(items), path, depth)
            }
            _ => Err(Mismatch {
                path: shown(path),
                problem: format!("expected an object, found {}", found(v)),
            }),
        }
    }

    /// An externally tagged enum. A variant name the shape does not list is taken: the
    /// type may have an alias for it or a `#[serde(other)]` variant, which tracing does not
    /// show. A listed variant's content is checked.
    fn check_enum(
        &self,
        variants: &[Variant],
        v: &Value,
        path: &mut String,
        depth: usize,
    ) -> Result<(), Mismatch> {
        match v {
            Value::String(_) => Ok(()),
            Value::Object(entries) if entries.len() == 1 => {
                let (name, content) = entries.iter().next().expect("one entry");
                let Some(variant) = variants.iter().find(|x| x.name == *name) else {
                    return Ok(());
                };
                let len = path.len();
                push_field(path, name);
                match &variant.content {
                    Content::Unit => {}
                    Content::Newtype(inner) => self.check_at(inner, content, path, depth + 1)?,
                    Content::Tuple(shapes) => self.check_tuple(shapes, content, path, depth)?,
                    Content::Struct(fields) => self.check_struct(fields, content, path, depth)?,
                }
                path.truncate(len);
                Ok(())
            }
            // A variant's index, or an array MessagePack may read as one: not sure, taken.
            Value::Number(n) if n.is_u64() => Ok(()),
            Value::Array(_) => Ok(()),
            _ => {
                let names: Vec<String> = variants.iter().map(|x| format!("`{}`", x.name)).collect();
                Err(Mismatch {
                    path: shown(path),
                    problem: format!(
                        "expected a variant name or a one-key object {{\"Variant\": …}} (one of {}), found {}",
                        names.join(", "),
                        found(v)
                    ),
                })
            }
        }
    }
}

/// Appends `.name` to a path.
fn push_field(path: &mut String, name: &str) {
    if !path.is_empty() {
        path.push('.');
    }
    path.push_str(name);
}

/// A path as errors show it: `payload` for the whole value, `payload[0]` for its first item.
fn shown(path: &str) -> String {
    if path.is_empty() || path.starts_with('[') {
        format!("payload{path}")
    } else {
        path.to_owned()
    }
}

/// An integer of `bits` bits: a JSON integer within its range.
fn check_int(signed: bool, bits: u8, v: &Value, path: &str) -> Result<(), Mismatch> {
    let kind = if signed {
        "an integer"
    } else {
        "an unsigned integer"
    };
    let Value::Number(n) = v else {
        return Err(Mismatch {
            path: shown(path),
            problem: format!("expected {kind}, found {}", found(v)),
        });
    };
    let (min, max): (i128, i128) = match (signed, bits) {
        (_, b) if b >= 128 => (if signed { i128::MIN } else { 0 }, i128::MAX),
        (true, b) => (-(1i128 << (b - 1)), (1i128 << (b - 1)) - 1),
        (false, b) => (0, (1i128 << b) - 1),
    };
    let value = n
        .as_u64()
        .map(i128::from)
        .or_else(|| n.as_i64().map(i128::from));
    match value {
        Some(x) if (min..=max).contains(&x) => Ok(()),
        Some(x) => Err(Mismatch {
            path: shown(path),
            problem: format!(
                "expected {kind} from {min} to {max} ({}{bits}), found {x}",
                if signed { "i" } else { "u" }
            ),
        }),
        None => Err(Mismatch {
            path: shown(path),
            problem: format!("expected {kind}, found {}", found(v)),
        }),
    }
}

/// What a JSON value is, for errors.
fn found(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(_) => "a boolean".into(),
        Value::Number(n) if n.is_f64() => format!("the number {n}"),
        Value::Number(_) => "an integer".into(),
        Value::String(_) => "a string".into(),
        Value::Array(_) => "an array".into(),
        Value::Object(_) => "an object".into(),
    }
}

/// One step of a path into a sample.
#[derive(Clone, Debug)]
enum Step {
    Key(String),
    Index(usize),
}

/// A struct-like container: a struct (no variant) or an enum's struct variant.
type StructId = (String, Option<String>);

/// Decodes a JSON payload as `dq serve` stores it and the worker reads it: encoded to
/// MessagePack by field name, then decoded as `T`. The error's text on failure.
fn decodes_as<T: DeserializeOwned>(v: &Value) -> Result<T, String> {
    let bytes = crate::payload::encode(v, usize::MAX).map_err(|e| e.to_string())?;
    crate::payload::decode::<T>(&bytes).map_err(|e| e.to_string())
}

/// Traces `T` (see the module docs).
fn trace<T: Serialize + DeserializeOwned>() -> Option<PayloadShape> {
    let (root, samples, registry) = trace_all::<T>()?;
    // The samples as the JSON a client would send (their MessagePack, as the worker's
    // producers write it, read back as JSON); each must decode back through dq serve's path,
    // or the JSON form of the type is not what tracing saw (fields renamed one way only,
    // bytes, …): no shape.
    let mut json = Vec::with_capacity(samples.len());
    for s in &samples {
        let bytes = crate::payload::encode(s, usize::MAX).ok()?;
        let v: Value = rmp_serde::from_slice(crate::trace::split(&bytes).1).ok()?;
        decodes_as::<T>(&v).ok()?;
        json.push(v);
    }
    // Where each struct appears first in the samples.
    let mut found: BTreeMap<StructId, (usize, Vec<Step>)> = BTreeMap::new();
    for (i, v) in json.iter().enumerate() {
        walk(&root, &registry, v, &mut Vec::new(), i, &mut found, 0);
    }
    let required = |id: StructId, fields: &[Named<Format>]| -> Vec<bool> {
        let Some((i, at)) = found.get(&id) else {
            return vec![false; fields.len()];
        };
        let Some(Value::Object(object)) = get(&json[*i], at) else {
            return vec![false; fields.len()];
        };
        // A field traced but not in the sample is optional, or an alias of another field:
        // missing fields cannot be told apart from aliases there, so none is required.
        if fields.iter().any(|f| !object.contains_key(&f.name)) {
            return vec![false; fields.len()];
        }
        fields
            .iter()
            .map(|f| {
                let mut without = json[*i].clone();
                if let Some(Value::Object(o)) = get_mut(&mut without, at) {
                    o.remove(&f.name);
                }
                // required only when serde says so: a type's own rule failing for another
                // reason does not make the field required
                decodes_as::<T>(&without)
                    .is_err_and(|e| e.contains(&format!("missing field `{}`", f.name)))
            })
            .collect()
    };
    let fields_of = |id: StructId, fields: &[Named<Format>]| -> Option<Vec<Field>> {
        let required = required(id, fields);
        fields
            .iter()
            .zip(required)
            .map(|(f, required)| {
                Some(Field {
                    name: f.name.clone(),
                    shape: shape_of(&f.value)?,
                    required,
                })
            })
            .collect()
    };
    let mut types = BTreeMap::new();
    for (name, container) in &registry {
        let t = match container {
            ContainerFormat::UnitStruct => TypeShape::UnitStruct,
            ContainerFormat::NewTypeStruct(f) => TypeShape::Newtype(shape_of(f)?),
            ContainerFormat::TupleStruct(fs) => {
                TypeShape::TupleStruct(fs.iter().map(shape_of).collect::<Option<_>>()?)
            }
            ContainerFormat::Struct(fs) => TypeShape::Struct(fields_of((name.clone(), None), fs)?),
            ContainerFormat::Enum(variants) => TypeShape::Enum(
                variants
                    .values()
                    .map(|v| {
                        let content = match &v.value {
                            VariantFormat::Unit => Content::Unit,
                            VariantFormat::NewType(f) => Content::Newtype(shape_of(f)?),
                            VariantFormat::Tuple(fs) => {
                                Content::Tuple(fs.iter().map(shape_of).collect::<Option<_>>()?)
                            }
                            VariantFormat::Struct(fs) => Content::Struct(fields_of(
                                (name.clone(), Some(v.name.clone())),
                                fs,
                            )?),
                            VariantFormat::Variable(_) => return None,
                        };
                        Some(Variant {
                            name: v.name.clone(),
                            content,
                        })
                    })
                    .collect::<Option<_>>()?,
            ),
        };
        types.insert(name.clone(), t);
    }
    Some(PayloadShape {
        root: shape_of(&root)?,
        types,
    })
}

/// Traces `T` until every variant of every enum in it is seen: the root's format, sample
/// values, and the named types. An enum nested in `T` is only explored further once the
/// tracer is told it was incomplete, by name: the names come from the registry's error of a
/// round before (a few rounds at most, each adding the enums it found).
fn trace_all<T: DeserializeOwned>() -> Option<(Format, Vec<T>, Registry)> {
    static NO_SAMPLES: std::sync::LazyLock<serde_reflection::Samples> =
        std::sync::LazyLock::new(serde_reflection::Samples::new);
    let mut enums: Vec<String> = Vec::new();
    for _round in 0..8 {
        // (as rmp-serde decodes: not human-readable)
        let config = serde_reflection::TracerConfig::default().is_human_readable(false);
        let mut tracer = serde_reflection::Tracer::new(config);
        let mut samples = Vec::new();
        let mut root = None;
        for _pass in 0..256 {
            let (format, value) = tracer.trace_type_once::<T>(&NO_SAMPLES).ok()?;
            samples.push(value);
            let mut names: Vec<String> = enums.clone();
            if let Format::TypeName(name) = &format {
                names.push(name.clone());
            }
            root = Some(format);
            let mut incomplete = false;
            for name in &names {
                if let Some(reason) = tracer.check_incomplete_enum(name) {
                    incomplete = true;
                    if matches!(
                        reason,
                        serde_reflection::IncompleteEnumReason::NamedVariantsRemaining
                    ) && samples.len() > 1
                    {
                        samples.pop();
                    }
                }
            }
            if !incomplete {
                break;
            }
        }
        match tracer.registry() {
            Ok(registry) => return Some((root?, samples, registry)),
            Err(serde_reflection::Error::MissingVariants(missing)) => {
                let before = enums.len();
                for name in missing {
                    if !enums.contains(&name) {
                        enums.push(name);
                    }
                }
                if enums.len() == before {
                    return None;
                }
            }
            Err(_) => return None,
        }
    }
    None
}

/// A traced format as a shape (`None` for a format left unknown).
fn shape_of(f: &Format) -> Option<Shape> {
    let int = |signed, bits| Shape::Int { signed, bits };
    Some(match f {
        Format::Variable(_) => return None,
        Format::TypeName(n) => Shape::Named(n.clone()),
        Format::Unit => Shape::Unit,
        Format::Bool => Shape::Bool,
        Format::I8 => int(true, 8),
        Format::I16 => int(true, 16),
        Format::I32 => int(true, 32),
        Format::I64 => int(true, 64),
        Format::I128 => int(true, 128),
        Format::U8 => int(false, 8),
        Format::U16 => int(false, 16),
        Format::U32 => int(false, 32),
        Format::U64 => int(false, 64),
        Format::U128 => int(false, 128),
        Format::F32 | Format::F64 => Shape::Float,
        Format::Char => Shape::Char,
        Format::Str => Shape::Str,
        Format::Bytes => Shape::Bytes,
        Format::Option(x) => Shape::Option(Box::new(shape_of(x)?)),
        Format::Seq(x) => Shape::Seq(Box::new(shape_of(x)?)),
        Format::Map { value, .. } => Shape::Map(Box::new(shape_of(value)?)),
        Format::Tuple(xs) => Shape::Tuple(xs.iter().map(shape_of).collect::<Option<_>>()?),
        Format::TupleArray { content, size } => Shape::Array {
            item: Box::new(shape_of(content)?),
            len: *size,
        },
    })
}

/// Records where each struct of `f` first appears in sample `sample`'s JSON `v`.
fn walk(
    f: &Format,
    registry: &Registry,
    v: &Value,
    at: &mut Vec<Step>,
    sample: usize,
    found: &mut BTreeMap<StructId, (usize, Vec<Step>)>,
    depth: usize,
) {
    if depth > MAX_DEPTH {
        return;
    }
    let mut items = |fs: &mut dyn Iterator<Item = &Format>, v: &Value, at: &mut Vec<Step>| {
        if let Value::Array(items) = v {
            for (i, (f, item)) in fs.zip(items).enumerate() {
                at.push(Step::Index(i));
                walk(f, registry, item, at, sample, found, depth + 1);
                at.pop();
            }
        }
    };
    match f {
        Format::Option(inner) => walk(inner, registry, v, at, sample, found, depth + 1),
        Format::Seq(inner) | Format::TupleArray { content: inner, .. } => {
            items(&mut std::iter::repeat(inner.as_ref()), v, at);
        }
        Format::Tuple(fs) => items(&mut fs.iter(), v, at),
        Format::Map { value, .. } => {
            if let Value::Object(o) = v {
                for (k, e) in o {
                    at.push(Step::Key(k.clone()));
                    walk(value, registry, e, at, sample, found, depth + 1);
                    at.pop();
                }
            }
        }
        Format::TypeName(name) => match registry.get(name) {
            Some(ContainerFormat::NewTypeStruct(inner)) => {
                walk(inner, registry, v, at, sample, found, depth + 1);
            }
            Some(ContainerFormat::TupleStruct(fs)) => items(&mut fs.iter(), v, at),
            Some(ContainerFormat::Struct(fs)) => {
                walk_struct(
                    (name.clone(), None),
                    fs,
                    registry,
                    v,
                    at,
                    sample,
                    found,
                    depth,
                );
            }
            Some(ContainerFormat::Enum(variants)) => {
                let Value::Object(o) = v else { return };
                let Some((vname, content)) = o.iter().next() else {
                    return;
                };
                let Some(variant) = variants.values().find(|x| x.name == *vname) else {
                    return;
                };
                at.push(Step::Key(vname.clone()));
                match &variant.value {
                    VariantFormat::NewType(inner) => {
                        walk(inner, registry, content, at, sample, found, depth + 1);
                    }
                    VariantFormat::Tuple(fs) => items(&mut fs.iter(), content, at),
                    VariantFormat::Struct(fs) => walk_struct(
                        (name.clone(), Some(vname.clone())),
                        fs,
                        registry,
                        content,
                        at,
                        sample,
                        found,
                        depth,
                    ),
                    _ => {}
                }
                at.pop();
            }
            _ => {}
        },
        _ => {}
    }
}

#[allow(clippy::too_many_arguments)]
fn walk_struct(
    id: StructId,
    fields: &[Named<Format>],
    registry: &Registry,
    v: &Value,
    at: &mut Vec<Step>,
    sample: usize,
    found: &mut BTreeMap<StructId, (usize, Vec<Step>)>,
    depth: usize,
) {
    let Value::Object(o) = v else { return };
    found.entry(id).or_insert_with(|| (sample, at.clone()));
    for f in fields {
        if let Some(e) = o.get(&f.name) {
            at.push(Step::Key(f.name.clone()));
            walk(&f.value, registry, e, at, sample, found, depth + 1);
            at.pop();
        }
    }
}

fn get<'a>(mut v: &'a Value, at: &[Step]) -> Option<&'a Value> {
    for step in at {
        v = match step {
            Step::Key(k) => v.get(k)?,
            Step::Index(i) => v.get(i)?,
        };
    }
    Some(v)
}

fn get_mut<'a>(mut v: &'a mut Value, at: &[Step]) -> Option<&'a mut Value> {
    for step in at {
        v = match step {
            Step::Key(k) => v.get_mut(k)?,
            Step::Index(i) => v.get_mut(i)?,
        };
    }
    Some(v)
}

#[cfg(test)]
mod tests;
