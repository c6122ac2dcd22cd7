#[dq::delayed_job(topic = "orders.close", data())]
async fn close_order(_id: u64) -> Result<(), dq::JobError> {
    Ok(())
}

fn main() {}
