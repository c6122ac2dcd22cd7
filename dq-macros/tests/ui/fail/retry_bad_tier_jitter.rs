#[dq::delayed_job(retry = "15s, 3m, 10m; jitter = 10")]
async fn call_partner(_id: u64) -> Result<(), dq::JobError> {
    Ok(())
}

fn main() {}
