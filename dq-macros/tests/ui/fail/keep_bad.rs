// Retention attributes are checked at compile time.
#[dq::delayed_job(keep_succeeded = "0s")]
async fn zero(_id: u64) -> Result<(), dq::JobError> {
    Ok(())
}

#[dq::delayed_job(keep_cancelled = "91d")]
async fn too_long(_id: u64) -> Result<(), dq::JobError> {
    Ok(())
}

#[dq::delayed_job(keep_max = 100)]
async fn cap_alone(_id: u64) -> Result<(), dq::JobError> {
    Ok(())
}

#[dq::delayed_job(keep_expired = "1h", keep_max = 0)]
async fn cap_zero(_id: u64) -> Result<(), dq::JobError> {
    Ok(())
}

fn main() {}
