#[dq::delayed_job(retry = "15s", topic = "orders.close", retry = "3m")]
async fn close_order(_id: u64) -> Result<(), dq::JobError> {
    Ok(())
}

fn main() {}
