#[dq::delayed_job(tz = "Europe/Berlin")]
async fn report(_unit: ()) -> Result<(), dq::JobError> {
    Ok(())
}

fn main() {}
