#[dq::delayed_job(retry = "exponential(1s, 1h, 10, jitter = 150%)")]
async fn close_order(_id: u64) -> Result<(), dq::JobError> {
    Ok(())
}

fn main() {}
