struct NotAnError;

#[dq::delayed_job]
async fn close_order(_id: u64) -> Result<(), NotAnError> {
    Ok(())
}

fn main() {}
