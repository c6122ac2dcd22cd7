//! Payload shapes kept by the stores: written and read back, the last writer's kept, and a
//! stored shape of a format this dq does not read taken as none (on a real redis-server and
//! in the embedded store).

use serde::{Deserialize, Serialize};

use super::Store;
use super::catalog::Catalog;
use super::memory::MemoryStore;
use super::redis::{RedisOptions, RedisStore, layout};
use crate::names::Topic;
use crate::shape::PayloadShape;

#[derive(Serialize, Deserialize)]
struct CloseOrder {
    order_id: u64,
}

#[derive(Serialize, Deserialize)]
struct CloseOrderV2 {
    order_id: u64,
    reason: String,
}

/// What every store does with shapes.
async fn round_trip(store: &dyn Store) {
    let topic = Topic::new("orders.close").unwrap();
    let other = Topic::new("orders.other").unwrap();
    assert_eq!(store.payload_shape(&topic).await.unwrap(), None);
    let v1 = PayloadShape::of::<CloseOrder>().unwrap();
    let v2 = PayloadShape::of::<CloseOrderV2>().unwrap();
    store.put_payload_shape(&topic, Some(&v1)).await.unwrap();
    assert_eq!(store.payload_shape(&topic).await.unwrap(), Some(v1));
    store.put_payload_shape(&topic, Some(&v2)).await.unwrap();
    assert_eq!(
        store.payload_shape(&topic).await.unwrap(),
        Some(v2),
        "the last writer's"
    );
    assert_eq!(store.payload_shape(&other).await.unwrap(), None);
    store.put_payload_shape(&other, None).await.unwrap();
    store.put_payload_shape(&topic, None).await.unwrap();
    assert_eq!(
        store.payload_shape(&topic).await.unwrap(),
        None,
        "a type without a shape deletes the one stored"
    );
    let v1 = PayloadShape::of::<CloseOrder>().unwrap();
    store.put_payload_shape(&topic, Some(&v1)).await.unwrap();
}

#[tokio::test]
async fn the_embedded_store_keeps_shapes_and_skips_a_newer_format() {
    let store = MemoryStore::new();
    round_trip(&store).await;
    let topic = Topic::new("orders.newer").unwrap();
    store
        .lock_shapes()
        .insert(topic.clone(), b"2|a newer dq's shape".to_vec());
    assert_eq!(store.payload_shape(&topic).await.unwrap(), None);
}

#[tokio::test]
async fn redis_keeps_shapes_and_skips_a_newer_format() {
    let server = dq_testkit::RedisServer::start();
    let ns = dq_testkit::namespace("shapes");
    let options = RedisOptions {
        namespace: ns.clone(),
        ..RedisOptions::default()
    };
    let store = RedisStore::connect(&server.url(), options).await.unwrap();
    round_trip(&store).await;
    let key = layout::shapes_key(&ns);
    let stored: Vec<u8> = server.cmd(&["HGET", &key, "orders.close"]);
    assert!(stored.starts_with(b"1|"), "format 1 first");
    assert_eq!(server.cmd::<i64>(&["TTL", &key]), -1, "never expires");
    server.cmd::<i64>(&["HSET", &key, "orders.newer", "2|a newer dq's shape"]);
    server.cmd::<i64>(&["HSET", &key, "orders.garbage", "not a shape"]);
    for topic in ["orders.newer", "orders.garbage"] {
        let topic = Topic::new(topic).unwrap();
        assert_eq!(store.payload_shape(&topic).await.unwrap(), None);
    }
    // The layout's checker knows the key.
    let snapshot = layout::Snapshot::read(&store).await.unwrap();
    assert_eq!(snapshot.violations(), Vec::new());
}
