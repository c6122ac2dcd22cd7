#[dq::delayed_job]
async fn close_order<T: serde::de::DeserializeOwned>(_payload: T) -> Result<(), dq::JobError> {
    Ok(())
}

fn main() {}
