#[dq::delayed_job(retry = "fixed(1s)")]
async fn close_order(_id: u64) -> Result<(), dq::JobError> {
    Ok(())
}

fn main() {}
