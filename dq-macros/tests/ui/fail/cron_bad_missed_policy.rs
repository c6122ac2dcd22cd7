#[dq::delayed_job(every = "5m", missed = "twice")]
async fn report(_unit: ()) -> Result<(), dq::JobError> {
    Ok(())
}

fn main() {}
