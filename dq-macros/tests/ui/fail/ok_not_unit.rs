#[dq::delayed_job]
async fn close_order(id: u64) -> Result<u64, dq::JobError> {
    Ok(id)
}

fn main() {}
