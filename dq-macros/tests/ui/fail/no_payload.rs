#[dq::delayed_job]
async fn close_order() -> Result<(), dq::JobError> {
    Ok(())
}

fn main() {}
