#[dq::delayed_job]
async fn close_order(_id: u64, _ctx: String) -> Result<(), dq::JobError> {
    Ok(())
}

fn main() {}
