// A handler's value is kept with its succeeded job: it must be serde-serializable.
#[dq::delayed_job]
async fn close_order(_id: u64) -> Result<std::time::Instant, dq::JobError> {
    Ok(std::time::Instant::now())
}

fn main() {}
