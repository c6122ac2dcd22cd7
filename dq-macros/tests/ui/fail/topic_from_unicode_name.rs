#[dq::delayed_job]
async fn schließen(_id: u64) -> Result<(), dq::JobError> {
    Ok(())
}

fn main() {}
