#[dq::delayed_job(topic = "orders.close", retries = "15s")]
async fn close_order(_id: u64) -> Result<(), dq::JobError> {
    Ok(())
}

fn main() {}
