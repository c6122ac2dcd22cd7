#[dq::delayed_job(expires_after = "0s")]
async fn remind(_id: u64) -> Result<(), dq::JobError> {
    Ok(())
}

fn main() {}
