//! Conformance bodies: payload shapes. Each topic's is stored, read back and replaced by the
//! last writer; `None` deletes it; a topic without one reads none.

use dq::shape::PayloadShape;

use super::*;

/// Store, read, replace and delete a topic's payload shape.
pub async fn payload_shapes_are_stored_replaced_and_deleted<H: Harness>(h: &H) {
    #[derive(Serialize, Deserialize)]
    struct V1 {
        order_id: u64,
    }
    #[derive(Serialize, Deserialize)]
    struct V2 {
        order_id: u64,
        note: String,
    }
    let store = h.store();
    let topic = Topic::new("shapes.orders").unwrap();
    let other = Topic::new("shapes.other").unwrap();
    assert_eq!(store.payload_shape(&topic).await.unwrap(), None);
    let (v1, v2) = (
        PayloadShape::of::<V1>().unwrap(),
        PayloadShape::of::<V2>().unwrap(),
    );
    store.put_payload_shape(&topic, Some(&v1)).await.unwrap();
    assert_eq!(
        store.payload_shape(&topic).await.unwrap().as_ref(),
        Some(&v1)
    );
    store.put_payload_shape(&topic, Some(&v2)).await.unwrap();
    assert_eq!(
        store.payload_shape(&topic).await.unwrap().as_ref(),
        Some(&v2),
        "the last writer's"
    );
    assert_eq!(store.payload_shape(&other).await.unwrap(), None);
    store.put_payload_shape(&topic, None).await.unwrap();
    assert_eq!(store.payload_shape(&topic).await.unwrap(), None);
    store.put_payload_shape(&topic, Some(&v1)).await.unwrap();
}
