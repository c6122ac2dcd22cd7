#[dq::delayed_job(cron = "0 0 * * * *", every = "1h")]
async fn report(_unit: ()) -> Result<(), dq::JobError> {
    Ok(())
}

fn main() {}
