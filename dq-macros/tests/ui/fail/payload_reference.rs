#[dq::delayed_job]
async fn close_order(_name: &str) -> Result<(), dq::JobError> {
    Ok(())
}

fn main() {}
