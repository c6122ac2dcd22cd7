#[dq::delayed_job(cron = "0 30 2 * * *", tz = "Europe/Atlantis")]
async fn report(_unit: ()) -> Result<(), dq::JobError> {
    Ok(())
}

fn main() {}
