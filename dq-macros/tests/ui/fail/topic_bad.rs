#[dq::delayed_job(topic = "a:b")]
async fn close_order(_id: u64) -> Result<(), dq::JobError> {
    Ok(())
}

fn main() {}
