#[dq::delayed_job]
async fn close_order(_id: u64, _ctx: dq::JobContext, _extra: u32) -> Result<(), dq::JobError> {
    Ok(())
}

fn main() {}
