struct Db;

#[dq::delayed_job(topic = "orders.close", data = Db)]
async fn close_order(_id: u64, ctx: dq::JobContext) -> Result<(), dq::JobError> {
    let _db = ctx.data::<Db>()?;
    Ok(())
}

fn main() {}
