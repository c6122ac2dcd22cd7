//! `data(…)`: the shared data a handler declares reaches its descriptor, in order, by type.

use std::sync::Arc;

use dq::{JobContext, JobError};

/// Shared data a handler declares (a database pool, say).
pub struct Db;
/// More shared data.
pub struct Mailer;

mod config {
    pub struct Settings;
}

#[dq::delayed_job(topic = "orders.close", data(Db, Mailer))]
async fn close_order(_id: u64, ctx: JobContext) -> Result<(), JobError> {
    let _ = (ctx.data::<Db>()?, ctx.data::<Mailer>()?);
    Ok(())
}

/// Paths, generics and a trailing comma; beside the other arguments, in any order.
#[dq::delayed_job(data(Arc<Db>, config::Settings,), retry = "none")]
fn blocking(_id: u64, ctx: JobContext) -> Result<(), JobError> {
    let _ = (ctx.data::<Arc<Db>>()?, ctx.data::<config::Settings>()?);
    Ok(())
}

#[dq::delayed_job]
async fn nothing(_id: u64) -> Result<(), JobError> {
    Ok(())
}

mod reexport {
    pub use ::dq as engine;
}

#[dq::delayed_job(crate = "crate::reexport::engine", topic = "via.reexport", data(Db))]
async fn via_reexport(_n: u64) -> Result<(), JobError> {
    Ok(())
}

#[test]
fn each_handler_lists_its_data_in_order_by_type() {
    let _ = (close_order, blocking, nothing, via_reexport);
    let needs = |topic: &str| -> Vec<(&'static str, std::any::TypeId)> {
        let d = dq::handler::registered_jobs()
            .find(|d| d.topic == topic)
            .unwrap();
        d.data
            .iter()
            .map(|n| (n.type_name(), n.type_id()))
            .collect()
    };
    use std::any::{TypeId, type_name};
    assert_eq!(
        needs("orders.close"),
        [
            (type_name::<Db>(), TypeId::of::<Db>()),
            (type_name::<Mailer>(), TypeId::of::<Mailer>()),
        ]
    );
    assert_eq!(
        needs("blocking"),
        [
            (type_name::<Arc<Db>>(), TypeId::of::<Arc<Db>>()),
            (
                type_name::<config::Settings>(),
                TypeId::of::<config::Settings>()
            ),
        ]
    );
    assert!(needs("nothing").is_empty());
    assert_eq!(
        needs("via.reexport"),
        [(type_name::<Db>(), TypeId::of::<Db>())]
    );
}
